"""Where the daemon's socket lives by default (one rule, shared with the daemon).

1. ``$JOURNALD_SOCKET`` when set (and not empty);
2. else ``$XDG_RUNTIME_DIR/journald/journald.sock`` when ``XDG_RUNTIME_DIR`` is set;
3. else ``<tempfile.gettempdir()>/journald-<uid>/journald.sock``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

SOCKET_ENV = "JOURNALD_SOCKET"
SOCKET_NAME = "journald.sock"


def default_socket_path(environ: Mapping[str, str] | None = None) -> str:
    """The socket path the daemon listens on and clients dial when none is given."""
    env = os.environ if environ is None else environ
    explicit = env.get(SOCKET_ENV)
    if explicit:
        return explicit
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "journald", SOCKET_NAME)
    return os.path.join(tempfile.gettempdir(), f"journald-{os.getuid()}", SOCKET_NAME)


def grpc_target(socket: str | None = None) -> str:
    """A gRPC target for a socket path, a ``unix:`` target, or the default path."""
    if socket is None or socket == "":
        return "unix:" + default_socket_path()
    if socket.startswith(("unix:", "unix-abstract:")):
        return socket
    return "unix:" + os.path.abspath(socket)
