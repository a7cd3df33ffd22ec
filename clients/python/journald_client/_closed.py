"""An awaitable that is already done: what a ``close()`` returns that does its work when
called, so that ``close()``, ``await x.close()`` and ``asyncio.run(x.close())`` all work and a
plain call leaves nothing un-awaited behind."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


class Closed(Coroutine[Any, Any, None]):
    """An already finished coroutine: what ``close()`` returns, so that ``await
    session.close()`` and ``asyncio.run(session.close())`` work and a plain call leaves
    nothing un-awaited behind."""

    def send(self, value: Any) -> Any:
        raise StopIteration(None)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield
