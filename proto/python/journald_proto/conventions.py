"""The two rules of the wire contract that the daemon and the Python client must apply
identically, so neither depends on the other for them (hand-written, not generated):

- where the daemon's socket is when no path is given (docs/protocol.md#transport);
- the record timestamp form (docs/protocol.md#timestamps).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime

SOCKET_ENV = "JOURNALD_SOCKET"
SOCKET_NAME = "journald.sock"
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

__all__ = [
    "SOCKET_ENV",
    "SOCKET_NAME",
    "TIMESTAMP_FORMAT",
    "default_socket_path",
    "format_ts",
    "now_ts",
]


def default_socket_path(environ: Mapping[str, str] | None = None) -> str:
    """The socket path the daemon listens on and clients dial when none is given:
    ``$JOURNALD_SOCKET`` when set and not empty, else
    ``$XDG_RUNTIME_DIR/journald/journald.sock``, else
    ``<tempfile.gettempdir()>/journald-<uid>/journald.sock``."""
    env = os.environ if environ is None else environ
    explicit = env.get(SOCKET_ENV)
    if explicit:
        return explicit
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "journald", SOCKET_NAME)
    return os.path.join(tempfile.gettempdir(), f"journald-{os.getuid()}", SOCKET_NAME)


def format_ts(moment: datetime) -> str:
    """An aware datetime as a record timestamp: RFC 3339 UTC, microseconds, ``Z``."""
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def now_ts() -> str:
    """Now, as a record timestamp, e.g. ``2026-11-30T12:00:00.000000Z``."""
    return datetime.now(UTC).strftime(TIMESTAMP_FORMAT)
