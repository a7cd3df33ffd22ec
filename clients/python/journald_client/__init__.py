"""journald-client: a thin Python client for the journald daemon."""

__version__ = "0.1.0"
