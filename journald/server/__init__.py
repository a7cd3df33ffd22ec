"""The daemon: a thin gRPC servicer over the core and a store."""

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest gRPC message either way (``journald serve --max-message-bytes``): room for a
record at its limit (4 MiB) and an attachment at its limit (8 MiB) with their envelopes;
anything bigger is refused before it reaches a handler, so one call cannot pin more."""
DEFAULT_SHUTDOWN_SAVE_S = 25.0
"""How long a shutdown waits for the lease ends' saves, from the signal on
(``journald serve --shutdown-save-s``): a bound apart from the calls' grace (10 s), since a
lease end of a 1M-record run saves its view index for up to ~20 s; under the shipped units'
``TimeoutStopSec=30`` (deploy/systemd)."""
