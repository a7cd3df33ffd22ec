"""What a restore, a fork and an import of a large conversation cost now that rebases and
checkpoints hold message pages (docs/design.md#message-pages; issue 31).

A coding agent reads N files of 800 KB (N tool results), checkpoints, types a follow-up,
then restores the checkpoint, forks it and imports its export into another run, on the file
backend and on JetStream behind a nats-server whose ``max_payload`` is 1 MiB.

    .venv/bin/python bench/bench_pages.py --results 10          # ~30 s, the CI-sized run
    .venv/bin/python bench/bench_pages.py                       # 80 x 800 KB (64 MiB), minutes

Prints per backend: the conversation's size, the bytes the restore wrote (data directory
growth on file; stream + bucket growth on JetStream) and their share of the conversation
(goal: at most 1%), and the restore, fork and import times. A daemon that refuses the
operation (before message pages: ``invalid_record``) is printed as refused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journald_client as jc  # noqa: E402
from journald_client import errors  # noqa: E402

from tests.daemon import Daemon  # noqa: E402
from tests.nats_server import NatsServer, create_stream  # noqa: E402

FP = jc.compute(provider="anthropic", model="bench", system_prompt="s")
STREAM = "PAGES"


def dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def stream_bytes(url: str) -> int:
    import nats

    from journald.storage.jetstream_buckets import ROLES, bucket_name

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        names = [STREAM, *(f"OBJ_{bucket_name(STREAM, role)}" for role in ROLES)]
        total = 0
        for name in names:
            total += (await js.stream_info(name)).state.bytes
        return total
    finally:
        await nc.close()


def timed(what: str, call: Callable[[], object]) -> tuple[float, str]:
    t = time.perf_counter()
    try:
        call()
    except errors.JournaldError as exc:
        return time.perf_counter() - t, f"refused: {exc.code}"
    return time.perf_counter() - t, "ok"


def scenario(client: jc.Client, n: int, result_bytes: int, written: Callable[[], int]) -> None:
    with client.start("reads", FP, "read the repository") as run:
        for i in range(n):
            tid = f"read_{i}"
            run.assistant(
                [{"type": "tool_use", "id": tid, "name": "read_file", "input": "{}"}],
                stop_reason="tool_use",
            )
            run.tool_result(tid, f"file {i}\n" + "x" * result_bytes)
        run.assistant("read them all", stop_reason="end_turn")
    cp = client.checkpoint("reads", label="after the reads")
    conv = len(json.dumps(client.fold("reads").messages, separators=(",", ":")))
    with client.resume("reads", FP) as run:
        run.user("now forget all that")
    before = written()
    restore_s, restore_ok = timed("restore", lambda: client.restore("reads", cp.checkpoint_id))
    grew = written() - before
    fork_s, fork_ok = timed(
        "fork", lambda: client.fork("reads", checkpoint_id=cp.checkpoint_id, new_run_id="forked")
    )
    data = client.export_checkpoint("reads", cp.checkpoint_id)
    with client.start("target", FP, "elsewhere") as run:
        run.assistant("ready", stop_reason="end_turn")
    import_s, import_ok = timed("import", lambda: client.import_checkpoint("target", data))
    print(f"  conversation              {conv / 2**20:9.2f} MiB ({n} x {result_bytes // 1024} KB)")
    share = f"{100 * grew / conv:.3f}% of the conversation" if restore_ok == "ok" else restore_ok
    print(f"  bytes written by restore  {grew / 1024:9.1f} KiB ({share})")
    for name, secs, ok in (
        ("restore", restore_s, restore_ok),
        ("fork", fork_s, fork_ok),
        ("import", import_s, import_ok),
    ):
        print(f"  {name:<8} {secs * 1000:9.1f} ms  {ok}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=int, default=80)
    ap.add_argument("--result-kb", type=int, default=800)
    ap.add_argument("--backends", default="file,jetstream")
    args = ap.parse_args()
    size = args.result_kb * 1024
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        root = Path(tmp)
        if "file" in args.backends:
            print("file backend")
            (root / "file").mkdir()
            with Daemon(root / "file", "file") as d, jc.connect(str(d.socket)) as c:
                scenario(c, args.results, size, lambda: dir_bytes(d.data_dir))
        if "jetstream" in args.backends:
            print("jetstream backend (nats-server max_payload 1 MiB)")
            server = NatsServer(root / "nats", extra_config=["max_payload: 1MB"])
            server.start()
            try:
                asyncio.run(create_stream(server.url, STREAM, "pages"))
                sock = Path(f"/tmp/jd-bench-pages-{os.getpid()}/s")
                args_js = ("--nats-url", server.url, "--stream", STREAM)
                (root / "jsd").mkdir()
                with (
                    Daemon(root / "jsd", "jetstream", *args_js, socket=sock) as d,
                    jc.connect(str(d.socket)) as c,
                ):
                    scenario(c, args.results, size, lambda: asyncio.run(stream_bytes(server.url)))
            finally:
                server.stop()


if __name__ == "__main__":
    os.environ.setdefault("JOURNALD_LOG_LEVEL", "WARNING")
    main()
