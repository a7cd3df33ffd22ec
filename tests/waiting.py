"""Bounded waits on a condition: the one way tests wait for something to happen.

A test never sleeps for a fixed time hoping a condition holds by then (on a loaded machine it
does not, and on an idle one the time is wasted). It polls the condition with a short,
growing interval until it holds or a deadline passes, then fails naming what it waited for::

    wait_until(lambda: path.exists(), what="the daemon's socket")
    lease = eventually(lambda: open_lease(), retry_on=(Locked,), what="the run to be released")
    await wait_until_async(lambda: not store.connected, what="the client to see the outage")

The poll interval below is the only pause these helpers take.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
"""A bound, not a wait: a condition that holds returns at once, so the bound only says how long
a broken one takes to fail. Generous for a 2-core machine running two suites side by side,
where a start-up or a reconnect that takes a second when idle can take ten or more."""
FIRST_POLL_S = 0.005
MAX_POLL_S = 0.1


class NotYet(Exception):
    """Raised by a polled function to say "not yet, poll again"."""


def _poll_intervals() -> Iterator[float]:
    interval = FIRST_POLL_S
    while True:
        yield interval
        interval = min(interval * 2, MAX_POLL_S)


def eventually(
    fn: Callable[[], T],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    retry_on: tuple[type[BaseException], ...] = (NotYet,),
) -> T:
    """Call ``fn`` until it returns without raising one of ``retry_on``; its result.

    After ``timeout_s`` the last such error propagates, chained to an ``AssertionError``
    naming ``what``."""
    deadline = time.monotonic() + timeout_s
    intervals = _poll_intervals()
    while True:
        try:
            return fn()
        except retry_on as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"gave up after {timeout_s:g}s waiting for {what}") from exc
        time.sleep(next(intervals))  # poll interval of this bounded wait


def wait_until(condition: Callable[[], T], *, what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> T:
    """Poll ``condition`` until it returns a truthy value (returned); bounded by ``timeout_s``."""

    def check() -> T:
        value = condition()
        if not value:
            raise NotYet(what)
        return value

    return eventually(check, what=what, timeout_s=timeout_s)


async def eventually_async(
    fn: Callable[[], Awaitable[T]],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    retry_on: tuple[type[BaseException], ...] = (NotYet,),
) -> T:
    """``eventually`` for a coroutine function, without blocking the event loop."""
    deadline = time.monotonic() + timeout_s
    intervals = _poll_intervals()
    while True:
        try:
            return await fn()
        except retry_on as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"gave up after {timeout_s:g}s waiting for {what}") from exc
        await asyncio.sleep(next(intervals))  # poll interval of this bounded wait


async def wait_until_async(
    condition: Callable[[], T], *, what: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> T:
    """``wait_until`` from a coroutine: the event loop keeps running between polls."""

    async def check() -> T:
        value = condition()
        if not value:
            raise NotYet(what)
        return value

    return await eventually_async(check, what=what, timeout_s=timeout_s)
