"""The shared I/O pool: a fixed number of threads, each journal's calls in order and never
two at once (docs/design.md#io-threads-and-file-descriptors)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from journald.storage.io_pool import IOPool


async def test_a_lane_runs_its_calls_one_at_a_time_in_the_order_they_were_made() -> None:
    pool = IOPool(4)
    lane = pool.lane()
    running = 0
    most_at_once = 0
    order: list[int] = []
    mutex = threading.Lock()

    def call(i: int) -> int:
        nonlocal running, most_at_once
        with mutex:
            running += 1
            most_at_once = max(most_at_once, running)
        order.append(i)
        for _ in range(2000):  # long enough that an overlap would show
            pass
        with mutex:
            running -= 1
        return i

    got = await asyncio.gather(*(lane.run(call, i) for i in range(200)))
    pool.stop()
    assert got == list(range(200))
    assert order == list(range(200))
    assert most_at_once == 1


async def test_calls_of_different_lanes_run_at_once_up_to_the_pool_size() -> None:
    pool = IOPool(3)
    inside = threading.Semaphore(0)
    release = threading.Event()

    def hold() -> None:
        inside.release()
        assert release.wait(20)

    calls = [asyncio.ensure_future(pool.lane().run(hold)) for _ in range(5)]
    for _ in range(3):
        assert await asyncio.to_thread(inside.acquire, True, 20)
    # the pool is full: a fourth call waits for a thread instead of starting one
    assert not await asyncio.to_thread(inside.acquire, True, 0.2)
    assert pool.threads == 3
    release.set()
    await asyncio.gather(*calls)
    pool.stop()
    assert pool.threads == 0


async def test_a_cancelled_call_keeps_its_lane_until_its_thread_is_done() -> None:
    pool = IOPool(2)
    lane = pool.lane()
    started = threading.Event()
    release = threading.Event()
    log: list[str] = []

    def slow() -> None:
        started.set()
        assert release.wait(20)
        log.append("slow done")

    def after() -> None:
        log.append("next")

    first = asyncio.ensure_future(lane.run(slow))
    assert await asyncio.to_thread(started.wait, 20)
    first.cancel()
    second = asyncio.ensure_future(lane.run(after))
    await asyncio.sleep(0)  # let both settle into their waits
    assert not second.done()
    release.set()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    pool.stop()
    assert log == ["slow done", "next"]


async def test_an_exception_in_a_call_reaches_its_caller_and_the_pool_goes_on() -> None:
    pool = IOPool(1)

    def boom() -> None:
        raise OSError(5, "I/O error")

    with pytest.raises(OSError, match="I/O error"):
        await pool.run(boom)
    assert await pool.run(lambda: 7) == 7
    pool.stop()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        IOPool(0)
