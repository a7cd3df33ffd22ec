"""A shared socket that knows each peer's uid: accept, ask the kernel, relay.

gRPC core does not hand a unix socket's peer credentials to Python (grpc/grpc#15511,
grpc/grpc#28755), so a daemon whose socket several uids may dial serves it itself:

* ``PeerGate`` listens on the public socket path. Each connection it accepts is read for its
  peer's credentials (``SO_PEERCRED``: uid, gid and pid, filled in by the kernel at
  ``connect``, so a peer cannot choose them) before a single byte of it is read;
* each uid gets its own gRPC server (``serve_uid``, built by the daemon on first use) listening
  on ``<socket dir>/.peers/<uid>.sock``, a directory only the daemon may enter, whose handlers
  know that uid (``edge.add_service(peer_uid=...)``): the socket is the identity;
* the gate then relays the bytes both ways between the peer and that server, with flow control
  (a side whose buffer fills stops reading the other), and closes one side when the other
  closes, so a client that dies still ends its leases at once.

The relay costs CPU per byte (measured by ``bench/bench_peer_relay.py``); a daemon on a
private socket (the default: one uid) has no gate and no relay. See
docs/design.md#who-may-talk-to-whom.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

log = logging.getLogger("journald.peers")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
PEERS_DIR = ".peers"


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _pid, uid, _gid = _UCRED.unpack(raw)
    return int(uid)


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED")


class _Half(asyncio.Protocol):
    """One side of a relayed connection; ``other`` is the side its bytes go to."""

    def __init__(self, paused: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Half | None = None
        self.closed = False
        self.paused = paused
        """Read nothing until linked (the peer's side: its uid is not known yet)."""
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.paused:
            transport.pause_reading()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)
        else:  # only ever what was in flight as reading paused
            self.early.append(data)

    def link(self, other: _Half) -> None:
        self.other = other
        assert other.transport is not None
        for data in self.early:
            other.transport.write(data)
        self.early.clear()

    def eof_received(self) -> bool | None:
        self.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.other is not None:
            self.other.close()

    def pause_writing(self) -> None:  # our buffer is full: stop reading the other side
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class PeerGate:
    """The public socket of a shared daemon (see the module's text)."""

    def __init__(
        self, path: Path, serve_uid: Callable[[int, Path], Coroutine[Any, Any, None]]
    ) -> None:
        self.path = path
        self.peers_dir = path.parent / PEERS_DIR
        self._serve_uid = serve_uid
        self._served: dict[int, asyncio.Task[None]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Connections accepted so far (tests, logs)."""

    def prepare(self) -> None:
        """The private directory of the per-uid servers: only the daemon enters it."""
        self.peers_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.peers_dir, 0o700)  # in the socket dir, which is ours alone to write
        for stale in self.peers_dir.glob("*.sock"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def uid_socket(self, uid: int) -> Path:
        return self.peers_dir / f"{uid}.sock"

    async def start(self) -> None:
        self.prepare()
        self._server = await asyncio.get_running_loop().create_unix_server(
            self._accepted, str(self.path)
        )

    def _accepted(self) -> _Half:
        half = _Half(paused=True)
        task = asyncio.get_running_loop().create_task(self._link(half))
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)
        return half

    async def _server_for(self, uid: int) -> Path:
        task = self._served.get(uid)
        if task is None or (task.done() and task.exception() is not None):
            task = asyncio.get_running_loop().create_task(
                self._serve_uid(uid, self.uid_socket(uid))
            )
            self._served[uid] = task
            log.info("first connection of uid %s: serving it on %s", uid, self.uid_socket(uid))
        await asyncio.shield(task)
        return self.uid_socket(uid)

    async def _link(self, down: _Half) -> None:
        await asyncio.sleep(0)  # connection_made has run (and paused reading)
        transport = down.transport
        if transport is None:
            return
        try:
            uid = peer_uid(transport.get_extra_info("socket"))
            path = await self._server_for(uid)
            up = _Half()
            await asyncio.get_running_loop().create_unix_connection(lambda: up, str(path))
        except Exception as exc:
            log.warning("refused a connection on %s: %s", self.path, exc)
            transport.close()
            return
        self.connections += 1
        up.link(down)
        down.link(up)
        if down.closed:
            up.close()
            return
        transport.resume_reading()

    async def close(self) -> None:
        """Stop accepting; the relays of connections still open end with their servers."""
        if self._server is not None:
            self._server.close()  # not wait_closed: it would wait for every relay to end
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
