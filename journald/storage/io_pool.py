"""A fixed number of threads for the store's blocking writes, shared by every open journal.

A write and its fdatasync block, so they run off the event loop. One thread per open journal
made the thread count grow with the leases (10,000 open runs, 10,000 threads, stacks and
wake-ups); the pool keeps it at ``size`` however many runs are open, starting threads only as
concurrent work needs them. Each journal calls in through its own ``IOLane``, which keeps that
journal's calls in order and never lets two of them overlap (a seal swaps the fd a listing
write reads), as a dedicated thread did. See docs/design.md#io-threads-and-file-descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_IO_THREADS = 16
"""Writer threads of a store: enough for 16 runs to fdatasync at once (a disk's queue
gains little from more); a daemon option (``journald serve --io-threads``)."""

DEFAULT_EXECUTOR_THREADS = 8
"""Threads of the event loop's default executor (reads, lock files, ``asyncio.to_thread``)."""

_Item = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class IOPool:
    """At most ``size`` threads running blocking calls for coroutines, first come first run."""

    def __init__(self, size: int = DEFAULT_IO_THREADS, name: str = "journald-io") -> None:
        if size < 1:
            raise ValueError(f"an I/O pool needs at least one thread (got {size})")
        self.size = size
        self._name = name
        self._q: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
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
        self._submit((contextvars.copy_context().run, (fn, *args), loop, fut))
        return await fut

    def _submit(self, item: _Item) -> None:
        start: threading.Thread | None = None
        with self._mutex:
            self._pending += 1
            if self._pending > len(self._threads) and len(self._threads) < self.size:
                start = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(start)
        self._q.put(item)
        if start is not None:
            start.start()

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            call, args, loop, fut = item
            try:
                res = call(*args)
            except BaseException as exc:
                settle: Callable[..., None] = settle_exc
                out: Any = exc
            else:
                settle, out = settle_ok, res
            finally:
                with self._mutex:
                    self._pending -= 1
            with contextlib.suppress(RuntimeError):  # the loop closed while we ran
                loop.call_soon_threadsafe(settle, fut, out)

    def stop(self) -> None:
        """End the idle threads (a later ``run`` starts new ones)."""
        with self._mutex:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._q.put(None)
        for t in threads:
            t.join(timeout=5)


class IOLane:
    """One journal's way into the pool: its calls run one at a time, in the order made."""

    def __init__(self, pool: IOPool) -> None:
        self._pool = pool
        self._turn = asyncio.Lock()  # FIFO: a waiter is never overtaken by a later caller

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


def bound_default_executor(
    loop: asyncio.AbstractEventLoop, size: int = DEFAULT_EXECUTOR_THREADS
) -> ThreadPoolExecutor:
    """Give ``loop`` a default executor of ``size`` threads (``asyncio.to_thread``,
    ``run_in_executor(None, ...)``): reads and lock files queue there instead of each
    taking a thread of their own."""
    executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="journald-blocking")
    loop.set_default_executor(executor)
    return executor
