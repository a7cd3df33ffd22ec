"""Start-up checks of ``journald serve`` and how a refusal is reported.

Before it serves, the daemon takes its data directory (``daemon.lock``, an exclusive flock
holding the pid, so two daemons never share one), checks and prepares its socket path (a stale
socket left by a dead daemon is replaced, a live one is refused) and opens its store. Each
refusal is an exception whose text is one short paragraph (what is wrong, then what to do) and
whose exit code says what kind of problem it is (``EXIT_CODES``, printed by ``journald serve
--help``); ``refusal`` maps the errors of the other layers (bad NATS options, a JetStream
configuration, unreachable servers) onto the same codes. Light on imports: the CLI reads
``EXIT_CODES`` for its help.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import os
import resource
import socket
import stat
from pathlib import Path
from typing import IO

from journald.core.errors import BackendUnavailable, JournaldError
from journald.storage.jetstream.config import NatsConfigError
from journald.storage.jetstream.options import NatsOptionsError

EXIT_CONFIG = 2
EXIT_HELD = 3
EXIT_BACKEND_UNREACHABLE = 5
EXIT_CODES = f"""exit codes:
  0  stopped by SIGTERM/SIGINT after a clean shutdown
  {EXIT_CONFIG}  refused: bad flags or configuration (including a JetStream stream, server or
     credentials journald cannot use); the message says what to change
  {EXIT_HELD}  refused: the data dir or the socket belongs to another running daemon
  {EXIT_BACKEND_UNREACHABLE}  refused: the NATS servers could not be reached
  1  anything else (a bug: the traceback is printed)"""


class StartupRefused(Exception):
    """The daemon cannot start as configured; printed as one paragraph, no traceback."""

    exit_code = EXIT_CONFIG


class DataDirLocked(StartupRefused):
    exit_code = EXIT_HELD


def lock_data_dir(
    data_dir: Path, busy_fix: str = "stop it, or start this one with another --data-dir"
) -> IO[str]:
    """Hold ``daemon.lock`` for the life of the process; refuse if another daemon holds it
    (the refusal ends with ``busy_fix``: what the caller's user can do)."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)
        fh = open(data_dir / "daemon.lock", "a+", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise StartupRefused(
            f"cannot use data dir {data_dir}: {exc.strerror or exc}; fix its ownership and "
            "permissions, or pass another --data-dir"
        ) from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        fh.seek(0)
        other = fh.read().strip() or "unknown"
        fh.close()
        raise DataDirLocked(
            f"data dir {data_dir} is held by another journald daemon (pid {other}); {busy_fix}"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


SOCKET_PATH_MAX = 107
"""sun_path holds 108 bytes including the terminating NUL."""


def check_socket_options(path: Path, group: str | None) -> None:
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise StartupRefused(
            f"socket path {path} is {len(os.fsencode(path))} bytes, longer than a unix socket "
            f"path may be ({SOCKET_PATH_MAX}); pass a shorter --socket"
        )
    if group is not None:
        try:
            grp.getgrnam(group)
        except KeyError:
            raise StartupRefused(
                f"--socket-group {group}: no such group on this host; create it "
                "(`groupadd`) or pass an existing one"
            ) from None


def shares_socket(mode: int, group: str | None) -> bool:
    """Whether uids other than the daemon's may dial the socket (then each peer's uid is
    learnt as it connects: journald.server.peers)."""
    return group is not None or bool(mode & 0o077)


def _untrusted_dir(parent: Path, st: os.stat_result) -> str | None:
    """Why the socket directory cannot be trusted (None: it can). Anyone who may write it
    can replace the socket with their own, and every client's words go to them."""
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        return (
            f"the socket directory {parent} is a symbolic link (to {os.readlink(parent)}); "
            f"remove it (`rm {parent}`) and start again, or pass a --socket in a directory of "
            "your own"
        )
    if not stat.S_ISDIR(st.st_mode):
        return f"{parent}, where the socket would go, is not a directory; pass another --socket"
    if st.st_uid not in (me, 0):  # root's directories (/run, /tmp) only root could make
        return (
            f"the socket directory {parent} belongs to uid {st.st_uid}, not to this daemon's uid "
            f"{me}: whoever owns it can replace the socket and read every client's calls. If "
            f"you did not create it, someone else may be waiting there: remove it (as root: "
            f"`rm -r {parent}`) and start again, or pass a --socket in a directory you own"
        )
    # in a sticky directory (/tmp) no one else may replace the socket once it is ours
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (
            f"the socket directory {parent} is writable by its group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): they could replace the socket and read every "
            f"client's calls. Make it private (`chmod 0700 {parent}`, 0750 with a socket "
            "group) or remove it, and start again"
        )
    return None


def check_socket_place(path: Path, group: str | None) -> None:
    """Refuse, before anything is written (the data dir included), a socket path that is too
    long, an unknown group, or a socket directory someone else could write."""
    check_socket_options(path, group)
    try:
        st = os.lstat(path.parent)
    except OSError:
        return  # made (or refused) by prepare_socket
    why = _untrusted_dir(path.parent, st)
    if why is not None:
        raise StartupRefused(why)
    _refuse_foreign_socket(path)


def _refuse_foreign_socket(path: Path) -> None:
    """A file at the socket path that another uid made (possible in a sticky directory) is
    refused before anything dials it."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if st.st_uid != os.geteuid():
        raise StartupRefused(
            f"{path} exists and belongs to uid {st.st_uid}, not to this daemon's uid "
            f"{os.geteuid()}: it may be someone waiting for your clients' calls. Remove it "
            f"(as root: `rm {path}`) or pass another --socket"
        )


def _refuse_foreign_dir_change(parent: Path, name: str, group: str | None) -> None:
    """A directory that holds more than journald's socket (``/run``, a home) is not given to
    the socket group: the operator is told what to change instead."""
    if os.lstat(parent).st_uid == os.geteuid() and set(os.listdir(parent)) <= {name, ".peers"}:
        return
    raise StartupRefused(
        f"the socket directory {parent} does not let group {group} reach the socket, and it "
        f"holds more than journald's socket, so it is left as it is; give the socket a "
        f"directory of its own (`--socket {parent}/journald/{name}`), or `chgrp {group} "
        f"{parent} && chmod g+rx {parent}`"
    )


def prepare_socket(path: Path, group: str | None) -> None:
    """Make the socket's directory (0700, or 0750 owned by ``group``) or check the one that
    exists: it must be a real directory of this daemon's uid that no one else may write.
    Then replace a stale socket (its daemon is gone) or refuse a live one."""
    check_socket_options(path, group)
    parent = path.parent
    dir_mode = 0o750 if group else 0o700
    created = False
    try:
        if not os.path.lexists(parent):
            parent.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            parent.mkdir(mode=dir_mode)
            created = True
        st = os.lstat(parent)
    except OSError as exc:
        raise StartupRefused(
            f"cannot create the socket directory {parent}: {exc.strerror or exc}; pass a "
            "--socket in a directory you may write"
        ) from None
    why = _untrusted_dir(parent, st)
    if why is not None:
        raise StartupRefused(why)
    _refuse_foreign_socket(path)
    if created or group:
        gid = grp.getgrnam(group).gr_gid if group else -1
        want = dir_mode if created else stat.S_IMODE(st.st_mode) | 0o050
        if not created and (gid, want) != (st.st_gid, stat.S_IMODE(st.st_mode)):
            _refuse_foreign_dir_change(parent, path.name, group)
        try:
            if gid != -1 and st.st_gid != gid:
                os.chown(parent, -1, gid)
            if stat.S_IMODE(st.st_mode) != want:
                os.chmod(parent, want)
        except OSError as exc:
            raise StartupRefused(
                f"cannot give the socket directory {parent} to group {group} (mode "
                f"{dir_mode:04o}): {exc.strerror or exc}; this daemon's uid must belong to the "
                "group (or be root), or pass another --socket-group"
            ) from None
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: its daemon is gone
        else:
            raise DataDirLocked(
                f"socket {path} is served by another running daemon; stop it or pass --socket"
            )
        finally:
            probe.close()


def refusal(exc: StartupRefused | NatsOptionsError | JournaldError) -> tuple[int, str]:
    """The exit code and the printed paragraph for an error that stops the start."""
    if isinstance(exc, StartupRefused):
        return exc.exit_code, str(exc)
    if isinstance(exc, NatsOptionsError):
        return EXIT_CONFIG, str(exc)
    if isinstance(exc, BackendUnavailable) and not isinstance(exc, NatsConfigError):
        return EXIT_BACKEND_UNREACHABLE, exc.message
    return EXIT_CONFIG, exc.message


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit of open files (RLIMIT_NOFILE) to the hard one: every open lease
    holds a lock fd and a journal fd, so the usual soft limit of 1,024 would cap a daemon at
    a few hundred leases. Returns (soft limit before, soft limit now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the soft limit must be a number: the kernel's cap
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text("ascii").strip())
        except (OSError, ValueError):
            target = soft
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return soft, soft
    return soft, target
