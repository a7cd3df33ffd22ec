"""The real daemon with one part swapped or instrumented, to measure in the same run what each
part of the append path costs (bench/run_all.py, steps ``whatif`` and ``anatomy``; never
shipped):

    .venv/bin/python bench/whatif_daemon.py MODE serve --socket ... --data-dir ...

* ``jsonschema``: every record evaluated by ``jsonschema`` against the published schema, as
  the daemon did before the compiled predicate (``journald/core/schema_predicate.py``) replaced it
  on the accept path; same errors, same float refusal;
* ``off``: no schema validation at all (the bound for any faster validator);
* ``noop``: ``Append`` and ``AppendStream`` answer an empty response at once (gRPC with
  journald's own protobuf messages and error edge: what any servicer would pay);
* ``nostore``: everything but the store (decode, validate, admit, fold, ack); the journal
  acknowledges without writing;
* ``timed``: the shipped daemon, recording for each durable write the wait for the writer
  thread, the write + fdatasync itself and the wait to get back on the event loop, as
  medians in the JSON file named by ``JOURNALD_BENCH_TIMINGS`` (rewritten every 100 writes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: F401 - puts the repo root on sys.path

MODES = ("jsonschema", "off", "noop", "nostore", "timed")


def patch(mode: str) -> None:
    import journald.server.service as service
    from journald.core import schema
    from journald.storage.file import journal as file_journal

    if mode == "off":
        service.validate_record = lambda rec: None  # type: ignore[attr-defined]
    elif mode == "jsonschema":
        # The compiled predicate refuses everything, so each record takes the jsonschema path
        # (which then accepts a valid record): exactly the validator as it was.
        schema._is_valid = lambda name: lambda instance: False
    elif mode == "noop":
        from journald_client.pb import journal_pb2 as pb

        from journald.server.edge import streaming

        async def append_noop(self: Any, request: Any, context: Any = None) -> Any:
            return pb.AppendResponse()

        async def stream_noop(self: Any, requests: Any, context: Any) -> Any:
            async for _ in requests:
                yield pb.AppendStreamResponse(response=pb.AppendResponse())

        service.JournalService._append = append_noop  # type: ignore[method-assign]
        # the edge calls the undecorated coroutine through ``parts()``: replace the RPC itself
        service.JournalService.AppendStream = streaming(stream_noop)  # type: ignore[method-assign]
    elif mode == "nostore":

        async def write_unstored(self: Any, new: Any) -> None:
            return None  # the pipeline plans, queues and acks the group as if written

        file_journal.FileJournal._write_group = write_unstored  # type: ignore[method-assign]
    elif mode == "timed":
        _instrument_writer(os.environ["JOURNALD_BENCH_TIMINGS"])
    else:
        raise SystemExit(f"unknown mode {mode!r}: one of {', '.join(MODES)}")


def _instrument_writer(out: str) -> None:
    """Time the three legs of the I/O pool: queue -> pool thread, the call, -> event loop."""
    import asyncio
    import contextlib
    import contextvars

    from journald.storage import io_pool

    legs: dict[str, list[float]] = {"to_writer_ms": [], "write_fdatasync_ms": [], "back_ms": []}

    def record(put: float, start: float, end: float) -> None:
        now = time.perf_counter()
        for key, value in zip(legs, (start - put, end - start, now - end), strict=True):
            legs[key].append(value * 1e3)
        if len(legs["back_ms"]) % 100 == 0:
            med = {k: sorted(v)[len(v) // 2] for k, v in legs.items()}
            Path(out).write_text(json.dumps({"writes": len(legs["back_ms"]), **med}))

    async def run(self: Any, fn: Any, *args: Any) -> Any:
        ev_loop = asyncio.get_running_loop()
        fut = ev_loop.create_future()
        put = time.perf_counter()
        times: list[float] = []

        def timed(*a: Any) -> Any:
            times.append(time.perf_counter())
            try:
                return fn(*a)
            finally:
                times.append(time.perf_counter())

        def settle(res: Any) -> None:
            if len(times) == 2:
                record(put, *times)
            io_pool.settle_ok(fut, res)

        def call(*a: Any) -> None:
            try:
                res = contextvars.copy_context().run(timed, *a)
            except BaseException as exc:
                with contextlib.suppress(RuntimeError):
                    ev_loop.call_soon_threadsafe(io_pool.settle_exc, fut, exc)
                return
            with contextlib.suppress(RuntimeError):
                ev_loop.call_soon_threadsafe(settle, res)

        # the pool settles ``done`` itself; ``fut`` is settled by ``call`` with the timings
        done = ev_loop.create_future()
        self._submit((call, args, ev_loop, done), io_pool._FOREGROUND)
        return await fut

    io_pool.IOPool.run = run  # type: ignore[method-assign]


def main() -> int:
    mode = sys.argv.pop(1)
    patch(mode)
    from journald.program import main as journald_main

    sys.argv[0] = "journald"
    return int(journald_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
