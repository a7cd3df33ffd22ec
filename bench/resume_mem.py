"""Resume and memory workloads for bench/run_all.py, against a real daemon.

* ``build_runs``: runs of N ~1 KB records written with the file backend's own writer;
* ``open_times``: ``Open`` (resume) of each run: time to the lease, bytes the daemon read
  (``rchar`` of /proc/PID/io), beside reading + JSON-parsing the run's files in a loop;
* ``history_tail``: ``History`` of the last page of a run (the daemon holds no lease on it);
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from common import RunWriter, run_bytes

PAGE = 50


def build_runs(data_dir: Path, sizes: dict[str, int]) -> dict[str, float]:
    """Write ``{run_id: records}`` into ``data_dir``; returns the seconds each took."""
    from journald.storage.file.store import FileStore

    writer = RunWriter()
    writer.check()
    took: dict[str, float] = {}

    async def go() -> None:
        store = FileStore(data_dir)
        try:
            for run_id, n in sizes.items():
                t0 = time.perf_counter()
                await writer.write(store, run_id, n)
                took[run_id] = time.perf_counter() - t0
        finally:
            await store.close()

    asyncio.run(go())
    return took


def rchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def parse_files(run_dir: Path) -> tuple[float, int]:
    """Read and JSON-parse every line of a run's files: (seconds, records)."""
    from journald.storage.file.segments import unframe

    files = (
        sorted((run_dir / "segments").glob("*.jsonl")) if (run_dir / "segments").is_dir() else []
    )
    files.append(run_dir / "journal.jsonl")
    t0 = time.perf_counter()
    n = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        for line in data.splitlines():
            if line:
                json.loads(unframe(line)[0])
                n += 1
    return time.perf_counter() - t0, n


async def _open_once(stub: Any, pb: Any, run_id: str, window: int = 0) -> tuple[float, int, int]:
    from journald.server.convert import fingerprint_to_pb
    from tests.builders import FP

    t0 = time.perf_counter()
    call = stub.Open(
        pb.OpenRequest(
            run_id=run_id,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=fingerprint_to_pb(FP),
            message_window=window,
        )
    )
    resp = await call.read()
    took = time.perf_counter() - t0
    last = resp.lease.last_seq
    call.cancel()
    return took, last, resp.ByteSize()


async def _wait_released(stub: Any, pb: Any, run_id: str) -> None:
    """The lease ends when the stream closes; wait until the daemon lists the run as free."""
    for _ in range(200):
        resp = await stub.List(pb.ListRequest())
        if all(r.status != "held" for r in resp.runs if r.run_id == run_id):
            return
        await asyncio.sleep(0.02)


def open_times(
    target: str, pid: int, data_dir: Path, runs: dict[str, int], reps: int, window: int = 0
) -> list[dict[str, Any]]:
    """Opens (resume) of each run, asking for ``window`` trailing messages (0: every one)."""
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    rows: list[dict[str, Any]] = []
    # the first Open response carries the whole folded state: allow what the Python client
    # allows (journald_client sets 64 MiB) and more, so 100k-record runs fit
    opts = [("grpc.max_receive_message_length", 512 * 1024 * 1024)]

    async def go() -> None:
        async with grpc.aio.insecure_channel(target, options=opts) as ch:
            stub = pbg.JournalServiceStub(ch)
            for run_id, n in runs.items():
                times, reads = [], []
                size = 0
                for _ in range(reps):
                    before = rchar(pid)
                    took, last, size = await _open_once(stub, pb, run_id, window)
                    reads.append(rchar(pid) - before)
                    times.append(took)
                    await _wait_released(stub, pb, run_id)
                    if last != n:
                        raise RuntimeError(f"Open of {run_id} saw last seq {last}, wanted {n}")
                run_dir = data_dir / "sessions" / run_id
                parse = [parse_files(run_dir)[0] for _ in range(reps)]
                rows.append(
                    {
                        "records": n,
                        "open_ms": statistics.median(times) * 1e3,
                        "open_all_ms": [t * 1e3 for t in times],
                        "bytes_read": int(statistics.median(reads)),
                        "response_bytes": size,
                        "run_bytes": run_bytes(run_dir),
                        "parse_ms": statistics.median(parse) * 1e3,
                    }
                )

    asyncio.run(go())
    return rows


def history_tail(target: str, run_id: str, total: int, reps: int) -> dict[str, Any]:
    """``History(offset=total-PAGE, limit=PAGE)`` of a run with ``total`` messages: the first
    call on a freshly started daemon (cold: nothing of the run in the daemon's memory; the
    OS page cache is warm), then ``reps - 1`` repeats (median)."""
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    async def go() -> dict[str, Any]:
        opts = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(target, options=opts) as ch:
            stub = pbg.JournalServiceStub(ch)
            req = pb.HistoryRequest(run_id=run_id, offset=max(0, total - PAGE), limit=PAGE)
            times = []
            resp = None
            for _ in range(max(1, reps)):
                t0 = time.perf_counter()
                resp = await stub.History(req)
                times.append(time.perf_counter() - t0)
            assert resp is not None
            return {
                "messages": resp.total,
                "page_ms": times[0] * 1e3,
                "warm_ms": statistics.median(times[1:]) * 1e3 if len(times) > 1 else None,
                "page_all_ms": [t * 1e3 for t in times],
                "page_messages": len(resp.messages),
            }

    return asyncio.run(go())


def open_probe(target: str, run_id: str) -> str:
    """One Open (resume) of ``run_id``: "ok" or the error the daemon answered."""
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pbg

    async def go() -> str:
        opts = [("grpc.max_receive_message_length", 1024 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(target, options=opts) as ch:
            try:
                await _open_once(pbg.JournalServiceStub(ch), pb, run_id)
            except grpc.aio.AioRpcError as err:
                return f"{err.code().name}: {err.details()}"
            return "ok"

    return asyncio.run(go())


def open_breakdown(data_dir: Path, run_id: str) -> dict[str, float]:
    """The steps of the daemon's Open of an existing run, timed in this process on the same
    code (ms): the fold from seq 1, the fold from the run's snapshot (loading its index and
    folding the records after it; the daemon saves one when a lease ends), the store's open
    for append, the first response's encoding."""
    from journald.server.convert import state_to_pb
    from journald.storage.file.checkpoint_store import FileCheckpointStore
    from journald.storage.file.store import FileStore
    from journald.writer.folding import fold_stored
    from journald.writer.marks import FoldMarks, snapshot_in

    async def go() -> dict[str, float]:
        store = FileStore(data_dir)
        marks = FoldMarks(FileCheckpointStore.colocated_with(str(data_dir / "sessions")))
        try:
            t0 = time.perf_counter()
            state = await fold_stored(store, run_id)
            t1 = time.perf_counter()
            doc = await marks.load_index(run_id)
            await fold_stored(store, run_id, None, snapshot_in(doc, run_id))
            t2 = time.perf_counter()
            journal = await store.open(run_id)
            t3 = time.perf_counter()
            state_to_pb(state).SerializeToString()
            t4 = time.perf_counter()
            await journal.close()
        finally:
            await store.close()
        return {
            "full fold (read + decode + verify + fold)": (t1 - t0) * 1e3,
            "fold from the snapshot (index load + tail)": (t2 - t1) * 1e3,
            "store.open (open for append)": (t3 - t2) * 1e3,
            "state_to_pb + serialize (the whole conversation)": (t4 - t3) * 1e3,
        }

    return asyncio.run(go())
