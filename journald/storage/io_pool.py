"""A fixed number of threads for the store's blocking writes, shared by every open journal.

A write and its fdatasync block, so they run off the event loop. One thread per open journal
made the thread count grow with the leases (10,000 open runs, 10,000 threads, stacks and
wake-ups); the pool keeps it at ``size`` however many runs are open, starting threads only as
concurrent work needs them. Each journal calls in through its own ``IOLane``, which keeps that
journal's calls in order and never lets two of them overlap (a seal swaps the fd a listing
write reads), as a dedicated thread did. See docs/design.md#io-threads-and-file-descriptors.

Two classes of work share the daemon's threads: the **foreground** (appends, Opens, List,
Fold: what an agent waits on) and the **background** (Verify, Load, History, Watch replays,
export, lease closes: bulk reads and clean-up). A call made in ``background()`` runs on the
default executor's own small pool of read threads, and waits behind every foreground call in
this pool, so a flood of reads or a dying client's thousand lease closes never takes the
threads an Open needs (docs/design.md#fair-shares).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from journald import failpoints

T = TypeVar("T")

DEFAULT_IO_THREADS = 16
"""Writer threads of a store: enough for 16 runs to fdatasync at once (a disk's queue
gains little from more); a daemon option (``journald serve --io-threads``)."""

DEFAULT_EXECUTOR_THREADS = 8
"""Threads of the event loop's default executor (reads, lock files, ``asyncio.to_thread``)."""

DEFAULT_READ_THREADS = 2
"""Threads of the background class (``journald serve --read-threads``): Verify, Load,
History, Watch replays, export and lease closes queue there, apart from the foreground."""

BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "journald_background", default=False
)
"""Whether the blocking calls made in this context are background work (see the module doc)."""

_FOREGROUND, _LOW, _STOP = 0, 1, 2
_Item = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Make the blocking calls of the enclosed code (and of tasks it creates) background."""
    token = BACKGROUND.set(True)
    try:
        yield
    finally:
        BACKGROUND.reset(token)


YIELD_EVERY = 4
"""Records a background walk checks between two offers of the interpreter to the others."""


BACKOFF_S = 0.001
"""How long a background walk pauses, at each offer, while foreground calls are running."""
_FOREGROUND_CALLS = [0]  # foreground calls submitted to the default executor, not done
_FOREGROUND_LOCK = threading.Lock()


def yield_to_foreground(count: int) -> None:
    """Called by a walk over records with its running count: every ``YIELD_EVERY`` records
    a background walk lets go of the interpreter lock, so the event loop (appends, Opens)
    takes it at once instead of after a whole switch interval of Verify's CPU work; while
    foreground calls are running it stays off the CPU for ``BACKOFF_S`` (with two read
    threads, letting go alone would often hand the lock to the other one)."""
    if count % YIELD_EVERY == 0 and BACKGROUND.get():
        time.sleep(BACKOFF_S if _FOREGROUND_CALLS[0] > 0 else 0)


def _foreground_done(_: Future[Any]) -> None:
    with _FOREGROUND_LOCK:  # on the worker thread that finished the call
        _FOREGROUND_CALLS[0] -= 1


def background_context() -> contextvars.Context:
    """A copy of the current context in which blocking calls are background work."""
    ctx = contextvars.copy_context()
    ctx.run(BACKGROUND.set, True)
    return ctx


class IOPool:
    """At most ``size`` threads running blocking calls for coroutines, first come first run."""

    def __init__(self, size: int = DEFAULT_IO_THREADS, name: str = "journald-io") -> None:
        if size < 1:
            raise ValueError(f"an I/O pool needs at least one thread (got {size})")
        self.size = size
        self._name = name
        # (class, order, item): foreground calls first, each class first come first run
        self._q: queue.PriorityQueue[tuple[int, int, _Item | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._pending = 0  # queued or running calls
        self._mutex = threading.Lock()

    @property
    def threads(self) -> int:
        """Threads started so far (never more than ``size``)."""
        return len(self._threads)

    def lane(self) -> IOLane:
        return IOLane(self)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread, in the caller's context (its trace spans)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        item = (contextvars.copy_context().run, (fn, *args), loop, fut)
        if BACKGROUND.get():
            self._submit(item, _LOW)
            return await fut
        with _FOREGROUND_LOCK:  # a write waits: background walks step aside meanwhile
            _FOREGROUND_CALLS[0] += 1
        try:
            self._submit(item, _FOREGROUND)
            return await fut
        finally:
            with _FOREGROUND_LOCK:
                _FOREGROUND_CALLS[0] -= 1

    def _submit(self, item: _Item, rank: int) -> None:
        start: threading.Thread | None = None
        with self._mutex:
            self._pending += 1
            if self._pending > len(self._threads) and len(self._threads) < self.size:
                start = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(start)
        self._q.put((rank, next(self._order), item))
        if start is not None:
            start.start()

    def _work(self) -> None:
        while self._run_one(self._q.get()[2]):
            pass

    def _run_one(self, item: _Item | None) -> bool:
        """Run one call (False: the stop sentinel). Its function and arguments are dropped
        before its caller is woken: an idle thread holds nothing of its last call (a closed
        journal's method), so the caller sees what it let go freed."""
        if item is None:
            return False
        call, args, loop, fut = item
        del item
        try:
            res = call(*args)
        except BaseException as exc:
            settle: Callable[..., None] = settle_exc
            out: Any = exc
        else:
            settle, out = settle_ok, res
        finally:
            del call, args
            with self._mutex:
                self._pending -= 1
        with contextlib.suppress(RuntimeError):  # the loop closed while we ran
            loop.call_soon_threadsafe(settle, fut, out)
        return True

    def stop(self) -> None:
        """End the idle threads (a later ``run`` starts new ones)."""
        with self._mutex:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._q.put((_STOP, next(self._order), None))
        for t in threads:
            t.join(timeout=5)


class IOLane:
    """One journal's way into the pool: its calls run one at a time, in the order made."""

    def __init__(self, pool: IOPool) -> None:
        self._pool = pool
        self._turn = asyncio.Lock()  # FIFO: a waiter is never overtaken by a later caller

    @property
    def turn(self) -> asyncio.Lock:
        """The lane's turn: held by a call of the lane, or by loop code (a group write whose
        fdatasync goes through AIO) that must not overlap the lane's calls."""
        return self._turn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._turn:
            call = asyncio.ensure_future(self._pool.run(fn, *args))
            try:
                return await asyncio.shield(call)
            except asyncio.CancelledError:
                # the thread keeps running the call: the lane stays taken until it ends
                if not call.done():
                    await asyncio.wait([call])
                raise


def settle_ok(fut: asyncio.Future[Any], res: Any) -> None:
    if not fut.done():
        fut.set_result(res)


def settle_exc(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _background_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if failpoints.ARMED:
        failpoints.hit("background_call")  # a test holds every read thread here
    return fn(*args, **kwargs)


READ_THREAD_NICE = 10
"""How much nicer than the daemon a read thread runs (Linux schedules threads one by one):
on a busy machine a Verify's walk gives the CPU to the event loop first."""


def lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the same priority
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + READ_THREAD_NICE
        )


class ClassedExecutor(ThreadPoolExecutor):
    """The daemon's default executor: ``size`` threads for the foreground and
    ``read_threads`` for calls submitted in ``background()`` (``asyncio.to_thread`` copies
    the caller's context, so the class follows the RPC or task that made the call)."""

    def __init__(self, size: int, read_threads: int) -> None:
        if size < 1 or read_threads < 1:
            raise ValueError(f"executor classes need a thread each (got {size}, {read_threads})")
        super().__init__(size, thread_name_prefix="journald-blocking")
        self.background = ThreadPoolExecutor(
            read_threads, thread_name_prefix="journald-reads", initializer=lower_priority
        )

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if BACKGROUND.get():
            return self.background.submit(_background_call, fn, *args, **kwargs)
        with _FOREGROUND_LOCK:
            _FOREGROUND_CALLS[0] += 1
        fut = super().submit(fn, *args, **kwargs)
        fut.add_done_callback(_foreground_done)
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait, cancel_futures=cancel_futures)
        self.background.shutdown(wait, cancel_futures=cancel_futures)


def bound_default_executor(
    loop: asyncio.AbstractEventLoop,
    size: int = DEFAULT_EXECUTOR_THREADS,
    read_threads: int = DEFAULT_READ_THREADS,
) -> ClassedExecutor:
    """Give ``loop`` a default executor of ``size`` foreground threads and ``read_threads``
    background ones (``asyncio.to_thread``, ``run_in_executor(None, ...)``): reads and lock
    files queue there instead of each taking a thread of their own."""
    executor = ClassedExecutor(size, read_threads)
    loop.set_default_executor(executor)
    return executor
