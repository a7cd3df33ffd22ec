"""A journal's ``fdatasync`` through Linux native AIO, submitted from the event loop.

Handing a group write and its ``fdatasync`` to an I/O-pool thread costs a unary Append more
CPU than the system calls do: the writer thread and the loop pass the interpreter lock back
and forth around each call (docs/benchmarks.md#unary-ablation-where-a-unary-appends-cpu-goes).
Here the loop submits an ``IOCB_CMD_FDSYNC`` iocb with ``io_submit`` and goes on serving; the
kernel runs the sync on its own worker and signals an ``eventfd`` when it completes; the loop,
woken by that descriptor (``loop.add_reader``), reaps the completion with a non-blocking
``io_getevents`` and settles the caller's future. No Python thread is involved, and the three
system calls are made without releasing the interpreter lock (``ctypes.PyDLL``): each returns
at once, so letting go of the lock would only invite the hand-offs this module exists to avoid.

One context per store (``AioSync``). ``probe(directory)`` makes one and proves it on a temp
file of the directory (a kernel before 4.18, or a filesystem without ``fsync`` for AIO,
answers ``EINVAL``); without it the store keeps the pool's ``os.fdatasync``
(docs/design.md#durable-writes-without-a-thread-hop). ``JOURNALD_AIO_SYNC`` (``auto``, ``on``,
``off``; or ``journald serve --aio-sync``) chooses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import itertools
import logging
import os
import platform
import time
import uuid
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Literal

from journald.core.errors import BackendUnavailable

log = logging.getLogger("journald.storage.aio")

ENV = "JOURNALD_AIO_SYNC"
Mode = Literal["auto", "on", "off"]
MODES: tuple[Mode, ...] = ("auto", "on", "off")

# x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl); another architecture
# gets no AIO and keeps the pool's fdatasync
_SYSCALLS = {"x86_64": (206, 207, 208, 209)}
IOCB_CMD_FDSYNC = 3
IOCB_FLAG_RESFD = 1 << 0
CAPACITY = 64
"""Syncs in flight per context at most; a caller past it waits for a slot (one per open
journal at most is in flight, each journal's writes being in turn)."""
PROBE_TIMEOUT_S = 10.0


class Iocb(ctypes.Structure):
    """``struct iocb`` of linux/aio_abi.h (64 bytes; little-endian: key before rw_flags)."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class IoEvent(ctypes.Structure):
    """``struct io_event``: the iocb's ``aio_data``, the iocb's address, ``res``, ``res2``."""

    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


@dataclass(slots=True)
class _Calls:
    nr_setup: int
    nr_destroy: int
    nr_getevents: int
    nr_submit: int
    holding: ctypes.PyDLL  # keeps the interpreter lock: for calls that return at once
    releasing: ctypes.CDLL  # lets go of it: for the probe's blocking wait and io_destroy

    def call(self, nr: int, *args: object, release: bool = False) -> int:
        fn = (self.releasing if release else self.holding).syscall
        ret = int(fn(ctypes.c_long(nr), *args))
        if ret < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return ret


def _calls() -> _Calls:
    nrs = _SYSCALLS.get(platform.machine())
    if nrs is None:
        raise OSError(errno.ENOSYS, f"no native AIO system calls known for {platform.machine()}")
    holding = ctypes.PyDLL(None, use_errno=True)
    releasing = ctypes.CDLL(None, use_errno=True)
    for lib in (holding, releasing):
        lib.syscall.restype = ctypes.c_long
    return _Calls(*nrs, holding, releasing)


def mode_from_env(value: str | None = None) -> Mode:
    """The mode ``JOURNALD_AIO_SYNC`` names (``auto`` when unset)."""
    raw = (os.environ.get(ENV, "") if value is None else value).strip().lower() or "auto"
    for mode in MODES:
        if raw == mode:
            return mode
    raise ValueError(f"{ENV}={raw!r}: use one of {', '.join(MODES)}")


def _destroy(calls: _Calls, ctx: int, efd: int, keep: object) -> None:
    """Free a context and its eventfd. ``io_destroy`` waits for the syncs still in flight
    (an FDSYNC cannot be cancelled), so their iocbs (held by ``keep``) outlive them."""
    with contextlib.suppress(OSError):
        calls.call(calls.nr_destroy, ctypes.c_ulong(ctx), release=True)
    with contextlib.suppress(OSError):
        os.close(efd)
    del keep


@dataclass(slots=True)
class _Op:
    iocb: Iocb
    ptrs: ctypes.Array[ctypes._Pointer[Iocb]]
    fut: asyncio.Future[float]
    fd: int
    t0: float


class AioSync:
    """One AIO context: ``await fdatasync(fd)`` on the event loop, without a thread."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._calls = _calls()
        self.capacity = capacity
        ctx = ctypes.c_ulong(0)
        self._calls.call(self._calls.nr_setup, ctypes.c_uint(capacity), ctypes.byref(ctx))
        self._ctx = ctx.value
        try:
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            self._calls.call(self._calls.nr_destroy, ctypes.c_ulong(self._ctx))
            raise
        self._pending: dict[int, _Op] = {}
        self._orphans: list[_Op] = []  # refused while in flight: kept until io_destroy
        self._room: deque[asyncio.Future[None]] = deque()  # callers waiting for a slot
        self._keys = itertools.count(1)
        self._events = (IoEvent * capacity)()
        self._counter = ctypes.c_uint64(0)
        self._zero = Timespec(0, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self._finalizer = weakref.finalize(
            self, _destroy, self._calls, self._ctx, self._efd, (self._pending, self._orphans)
        )

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def result(self, fd: int, res: int) -> int:
        """The completion's ``res`` for the sync of ``fd`` (0, or minus an errno). The seam
        for a test to make the device fail a sync, as ``FaultyDisk.fdatasync`` does."""
        return res

    async def fdatasync(self, fd: int) -> float:
        """``fdatasync(fd)`` by AIO; returns the seconds from submit to the loop seeing it
        done. A failed sync raises ``OSError`` with its errno, as ``os.fdatasync`` would."""
        loop = self._bind()
        while len(self._pending) >= self.capacity:
            room = loop.create_future()
            self._room.append(room)
            await room
            self._check_open()
        iocb = Iocb()
        key = next(self._keys)
        iocb.aio_data = key
        iocb.aio_lio_opcode = IOCB_CMD_FDSYNC
        iocb.aio_fildes = fd
        iocb.aio_flags = IOCB_FLAG_RESFD
        iocb.aio_resfd = self._efd
        ptrs = (ctypes.POINTER(Iocb) * 1)(ctypes.pointer(iocb))
        fut: asyncio.Future[float] = loop.create_future()
        t0 = time.perf_counter()
        self._calls.call(self._calls.nr_submit, ctypes.c_ulong(self._ctx), ctypes.c_long(1), ptrs)
        self._pending[key] = _Op(iocb, ptrs, fut, fd, t0)  # alive until it completes
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # the kernel goes on with the sync: the caller's turn stays taken until it ends
            if not fut.done():
                await asyncio.wait([fut])
            raise

    def _check_open(self) -> None:
        if self.closed:
            raise OSError(errno.EIO, "the store closed before the fdatasync was submitted")

    def _bind(self) -> asyncio.AbstractEventLoop:
        self._check_open()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._pending:
                raise RuntimeError("an AIO context serves one event loop at a time")
            if self._loop is not None:
                with contextlib.suppress(Exception):  # the old loop may be closed
                    self._loop.remove_reader(self._efd)
            loop.add_reader(self._efd, self._reap)
            self._loop = loop
        return loop

    def _reap(self) -> None:
        """The eventfd is readable: settle every completed sync."""
        lib = self._calls.holding
        lib.read(self._efd, ctypes.byref(self._counter), 8)  # reset it (EAGAIN: nothing)
        while self._pending:
            try:
                n = self._calls.call(
                    self._calls.nr_getevents,
                    ctypes.c_ulong(self._ctx),
                    ctypes.c_long(0),
                    ctypes.c_long(self.capacity),
                    self._events,
                    ctypes.byref(self._zero),
                )
            except InterruptedError:
                continue
            except OSError as exc:  # the context itself failed: nothing can be confirmed
                log.error("io_getevents failed (%s): the syncs in flight are refused", exc)
                self._refuse_pending(exc.errno or errno.EIO)
                return
            now = time.perf_counter()
            for i in range(n):
                ev = self._events[i]
                op = self._pending.pop(int(ev.data), None)
                if op is None:
                    continue
                res = self.result(op.fd, int(ev.res))
                if not op.fut.done():
                    if res < 0:
                        op.fut.set_exception(OSError(-res, os.strerror(-res)))
                    else:
                        op.fut.set_result(now - op.t0)
            self._wake_room()
            if n < self.capacity:
                return

    def _refuse_pending(self, code: int, why: str = "") -> None:
        """Fail every sync in flight with ``code``; their iocbs stay alive until the context
        is destroyed (the kernel may still complete them)."""
        pending = list(self._pending.values())
        self._pending.clear()
        self._orphans.extend(pending)
        for op in pending:
            if not op.fut.done():
                op.fut.set_exception(OSError(code, why or os.strerror(code)))

    def _wake_room(self) -> None:
        free = self.capacity - len(self._pending)
        while free > 0 and self._room:
            room = self._room.popleft()
            if not room.done():
                room.set_result(None)
                free -= 1

    def close(self) -> None:
        """Free the context. A sync still in flight is waited for by the kernel, and its
        caller gets ``EIO``: the store can no longer say whether it reached the disk."""
        if self.closed:
            return
        self.closed = True
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._efd)
        self._finalizer()  # io_destroy (waits for the kernel), then the eventfd is closed
        self._refuse_pending(errno.EIO, "the store closed before the fdatasync completed")
        self._orphans.clear()
        while self._room:
            room = self._room.popleft()
            if not room.done():
                room.set_result(None)  # the waiter sees the store closed

    # -- the probe ----------------------------------------------------------------------------

    def sync_now(self, fd: int, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """Submit one FDSYNC of ``fd`` and wait for it here, off any loop (the probe)."""
        if self._pending or self._loop is not None:
            raise RuntimeError("sync_now is for a context no loop uses yet")
        iocb = Iocb(aio_data=0, aio_lio_opcode=IOCB_CMD_FDSYNC, aio_fildes=fd)
        ptrs = (ctypes.POINTER(Iocb) * 1)(ctypes.pointer(iocb))
        c = self._calls
        c.call(c.nr_submit, ctypes.c_ulong(self._ctx), ctypes.c_long(1), ptrs)
        ts = Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        ev = IoEvent()
        try:
            n = c.call(
                c.nr_getevents,
                ctypes.c_ulong(self._ctx),
                ctypes.c_long(1),
                ctypes.c_long(1),
                ctypes.byref(ev),
                ctypes.byref(ts),
                release=True,
            )
        except OSError:
            self.close()  # io_destroy waits for the sync before iocb is freed
            raise
        if n != 1:
            self.close()
            raise OSError(errno.ETIMEDOUT, f"no AIO completion within {timeout_s:g} s")
        res = self.result(fd, int(ev.res))
        if res < 0:
            raise OSError(-res, os.strerror(-res))


def probe(directory: str, capacity: int = CAPACITY) -> AioSync:
    """A context proven by one FDSYNC of a temp file in ``directory``; raises ``OSError``
    naming why AIO cannot serve there (the caller falls back, or refuses under ``on``)."""
    sync = AioSync(capacity)
    path = os.path.join(directory, f".aio-probe-{uuid.uuid4().hex[:12]}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\n")
            sync.sync_now(fd)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
    except BaseException:
        sync.close()
        raise
    return sync


def open_for(directory: str, mode: Mode | None = None) -> AioSync | None:
    """The store's AIO context per ``mode`` (None: ``JOURNALD_AIO_SYNC``): ``off`` none;
    ``auto`` the probe's, or none (logged) when it fails; ``on`` the probe's, or its
    ``OSError``."""
    chosen = mode_from_env() if mode is None else mode
    if chosen == "off":
        return None
    try:
        return probe(directory)
    except OSError as exc:
        if chosen == "on":
            raise
        log.info(
            "fdatasync through Linux AIO is not available in %s (%s): the writer threads sync",
            directory,
            exc,
        )
        return None


def for_store(directory: str, choice: Mode | AioSync | None, *, plain_disk: bool) -> AioSync | None:
    """A file store's context: ``choice`` itself when it is one (a test's), else per its
    mode (None: ``JOURNALD_AIO_SYNC``). None for a store on a seam other than the plain
    ``Disk``, even under ``on``: a fault test's seam injects in its own ``fdatasync``. Under
    ``on``, a failed probe is ``BackendUnavailable``."""
    if isinstance(choice, AioSync):
        return choice
    mode = mode_from_env() if choice is None else choice
    if not plain_disk:
        return None
    try:
        return open_for(directory, mode)
    except OSError as exc:
        raise BackendUnavailable(
            f"fdatasync through Linux AIO was asked for ({ENV}=on or --aio-sync on) and "
            f"does not work in {directory}: {exc}; use --aio-sync auto (it falls back to "
            "the writer threads) or off",
            metadata={"path": directory},
        ) from exc
