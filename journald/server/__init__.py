"""The daemon: a thin gRPC servicer over the core and a store."""

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest gRPC message either way (``journald serve --max-message-bytes``): room for a
record at its limit (4 MiB) and an attachment at its limit (8 MiB) with their envelopes;
anything bigger is refused before it reaches a handler, so one call cannot pin more."""
