"""``Client.list_changes()``: a stream of notices naming the runs whose listing rows changed,
so a live listing Lists again only when something moved (docs/protocol.md#list-changes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from journald_client import errors


@dataclass(frozen=True, slots=True)
class ListChange:
    """One notice. ``ready``: the first one, the stream is live (List now: that listing
    misses nothing). Else ``run_ids``: the runs whose ``RunInfo`` may differ from the last
    List; ``all``: too many (or unknown) runs changed, List everything again."""

    ready: bool
    run_ids: tuple[str, ...]
    all: bool


class ListChanges:
    """Iterate for ``ListChange`` notices; ``cancel()`` (or leave the ``with``) to stop. The
    iteration ends when the daemon stops (List again after reconnecting)."""

    def __init__(self, call: Any, to_error: Callable[[grpc.RpcError], errors.JournaldError]):
        self._call = call
        self._to_error = to_error

    def __iter__(self) -> Iterator[ListChange]:
        try:
            for msg in self._call:
                yield ListChange(bool(msg.ready), tuple(msg.run_ids), bool(msg.all))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._to_error(exc) from None

    def cancel(self) -> None:
        self._call.cancel()

    def __enter__(self) -> ListChanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()
