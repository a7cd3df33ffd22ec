"""Where the daemon's socket lives by default (one rule, shared with the daemon through
``journald_proto.conventions``).

1. ``$JOURNALD_SOCKET`` when set (and not empty);
2. else ``$XDG_RUNTIME_DIR/journald/journald.sock`` when ``XDG_RUNTIME_DIR`` is set;
3. else ``<tempfile.gettempdir()>/journald-<uid>/journald.sock``.

Before a client sends a byte it checks who put the socket there (``check_socket``): another
user who pre-creates ``/tmp/journald-<uid>`` would otherwise receive every prompt and could
answer with tool calls the agent then runs (docs/protocol.md#peer-identity).
"""

from __future__ import annotations

import os
import pwd
import stat

from journald_proto.conventions import default_socket_path as default_socket_path  # re-exported

from journald_client.errors import UntrustedSocket

DAEMON_UID_ENV = "JOURNALD_DAEMON_UID"
ROOT_UID = 0


def grpc_target(socket: str | None = None) -> str:
    """A gRPC target for a socket path, a ``unix:`` target, or the default path."""
    if socket is None or socket == "":
        return "unix:" + default_socket_path()
    if socket.startswith(("unix:", "unix-abstract:")):
        return socket
    return "unix:" + os.path.abspath(socket)


def expected_daemon_uid(daemon_uid: int | str | None = None) -> int:
    """The uid the daemon must run as: ``daemon_uid``, else ``$JOURNALD_DAEMON_UID`` (a uid
    or a user name), else this process's own uid."""
    value: int | str | None = daemon_uid
    if value is None or value == "":
        value = os.environ.get(DAEMON_UID_ENV) or None
    if value is None:
        return os.geteuid()
    if isinstance(value, int):
        return value
    if value.strip().isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value.strip()).pw_uid
    except KeyError:
        raise UntrustedSocket(
            f"the expected daemon user {value!r} ({DAEMON_UID_ENV} or daemon_uid) does not "
            "exist on this host; set it to the uid or user name the daemon runs as",
            metadata={"expected_uid": value},
        ) from None


def _untrusted(socket: str, path: str, what: str, found: int, expected: int) -> UntrustedSocket:
    return UntrustedSocket(
        f"refusing to dial {socket}: {what}, so it may belong to someone waiting for your calls "
        f"(found uid {found}, expected the daemon's uid {expected} or root). If you started "
        f"the daemon yourself, stop whatever holds {path} (as root: remove it) and start the "
        f"daemon again; if the daemon runs as another user, set {DAEMON_UID_ENV} to that "
        "user (or pass daemon_uid)",
        metadata={
            "socket": socket,
            "path": path,
            "found_uid": str(found),
            "expected_uid": str(expected),
        },
    )


def check_socket(socket: str, daemon_uid: int | str | None = None) -> None:
    """Refuse (``UntrustedSocket``) a socket that the expected daemon uid (or root) did not
    put in a directory only it may write: the socket and its directory must each be owned
    by that uid or root, neither may be a symbolic link, and the directory may not be
    writable by its group or others unless it is sticky (``/tmp``). A socket that does not
    exist or that we may not reach passes (dialing it fails as unavailable). Nothing is sent
    anywhere."""
    expected = expected_daemon_uid(daemon_uid)
    trusted = (expected, ROOT_UID)
    directory = os.path.dirname(os.path.abspath(socket)) or "/"
    for path, is_dir in ((directory, True), (socket, False)):
        try:
            st = os.lstat(path)
        except (FileNotFoundError, PermissionError):
            return  # dialing it fails the same way, before a byte is sent
        except OSError as exc:
            raise _untrusted(
                socket, path, f"{path} cannot be examined ({exc})", -1, expected
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise _untrusted(socket, path, f"{path} is a symbolic link", st.st_uid, expected)
        if st.st_uid not in trusted:
            what = "its directory" if is_dir else "the socket"
            raise _untrusted(
                socket, path, f"{what} {path} belongs to another user", st.st_uid, expected
            )
        # a sticky directory (/tmp) lets no one replace a socket that is not theirs: the
        # socket's own owner, checked next, then says who put it there
        if is_dir and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _untrusted(
                socket,
                path,
                f"its directory {path} is writable by others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}), who could replace the socket",
                st.st_uid,
                expected,
            )


def checked_target(socket: str | None = None, daemon_uid: int | str | None = None) -> str:
    """``grpc_target(socket)`` once ``check_socket`` accepted its path. An abstract socket
    has no owner to check: it is refused."""
    target = grpc_target(socket)
    if target.startswith("unix-abstract:"):
        raise UntrustedSocket(
            f"refusing to dial {target}: an abstract socket has no owner, so anyone on the "
            "host may be serving it; use a socket path",
            metadata={"socket": target},
        )
    path = target.removeprefix("unix://") if target.startswith("unix://") else target[5:]
    check_socket(path, daemon_uid)
    return target
