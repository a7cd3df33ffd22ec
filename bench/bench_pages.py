"""What a restore, a fork and an import of a large conversation cost now that rebases and
checkpoints hold message pages (docs/design.md#message-pages; issue 31).

A coding agent reads N files of 800 KB (N tool results), checkpoints, types a follow-up,
then restores the checkpoint, forks it and imports its export into another run, on the file
backend and on JetStream behind a nats-server whose ``max_payload`` is 1 MiB.

    .venv/bin/python bench/bench_pages.py --results 10          # ~30 s, the CI-sized run
    .venv/bin/python bench/bench_pages.py --max-message-bytes 128MiB  # 80 x 800 KB (64 MiB)
    .venv/bin/python bench/bench_pages.py --daemon-code /tmp/old  # the daemon of another commit

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


def file_state(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[str(p)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


class FileWrites:
    """Bytes written under a directory since ``mark()``: the growth of an append-only journal
    file, and the whole size of every file created or replaced (atomic writes rename a new
    file over the old one: the fold snapshot, manifests, checkpoints)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.before = file_state(root)

    def mark(self) -> None:
        self.before = file_state(self.root)

    def signature(self) -> object:
        return file_state(self.root)

    def written(self, path: str, now: tuple[int, int, int]) -> int:
        ino, mtime, size = now
        old = self.before.get(path)
        if old is None or old[0] != ino:
            return size
        if old[1] != mtime:
            return size - old[2] if path.endswith(".jsonl") else size
        return 0

    def __call__(self) -> int:
        return sum(self.written(p, now) for p, now in file_state(self.root).items())

    def of(self, path: Path) -> int:
        """Bytes written to one file since ``mark()``."""
        now = file_state(self.root).get(str(path))
        return self.written(str(path), now) if now is not None else 0


class StreamWrites:
    """Bytes of the messages published to the stream and its buckets since ``mark()`` that
    are still stored (a replaced object's old chunks are purged, its new ones counted)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.last: dict[str, int] = {}

    def names(self) -> list[str]:
        from journald.storage.jetstream.buckets import ROLES, bucket_name

        return [STREAM, *(f"OBJ_{bucket_name(STREAM, role)}" for role in ROLES)]

    async def _lasts(self) -> dict[str, int]:
        import nats

        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            return {n: (await js.stream_info(n)).state.last_seq for n in self.names()}
        finally:
            await nc.close()

    def signature(self) -> object:
        return asyncio.run(self._lasts())

    async def _run(self, mark: bool) -> int:
        import nats
        from nats.js.errors import NotFoundError

        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            total = 0
            for name in self.names():
                last = (await js.stream_info(name)).state.last_seq
                if mark:
                    self.last[name] = last
                    continue
                for seq in range(self.last.get(name, 0) + 1, last + 1):
                    try:
                        msg = await js.get_msg(name, seq)
                    except NotFoundError:
                        continue
                    total += len(msg.data or b"") + len(msg.subject or "")
            return total
        finally:
            await nc.close()

    def mark(self) -> None:
        asyncio.run(self._run(True))

    def __call__(self) -> int:
        return asyncio.run(self._run(False))


def settled(written: FileWrites | StreamWrites) -> None:
    """Wait until nothing has been written for half a second (background lease closes)."""
    last = written.signature()
    while True:
        time.sleep(0.5)
        now = written.signature()
        if now == last:
            return
        last = now


def timed(what: str, call: Callable[[], object]) -> tuple[float, str]:
    t = time.perf_counter()
    try:
        call()
    except errors.JournaldError as exc:
        return time.perf_counter() - t, f"refused: {exc.code}"
    return time.perf_counter() - t, "ok"


def scenario(
    client: jc.Client,
    n: int,
    result_bytes: int,
    written: FileWrites | StreamWrites,
    snapshot: Callable[[], int] | None = None,
) -> None:
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
    settled(written)  # the follow-up's lease end has saved what it saves
    written.mark()
    restore_s, restore_ok = timed("restore", lambda: client.restore("reads", cp.checkpoint_id))
    # the daemon's own lease ends after the answer and saves the run's fold snapshot then
    settled(written)
    grew = written()
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
    if snapshot is not None:
        snap = snapshot()
        print(
            f"    of which fold snapshot  {snap / 1024:9.1f} KiB (saved when the daemon's lease "
            f"ends; {100 * (grew - snap) / conv:.3f}% without it)"
        )
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
    ap.add_argument(
        "--daemon-code",
        type=Path,
        help="run the daemon from this checkout (e.g. `git archive` of an older commit) to "
        "measure before and after in one machine state",
    )
    ap.add_argument(
        "--max-message-bytes",
        default="",
        help="the daemons' --max-message-bytes: an export inlines the whole conversation, so "
        "the 64 MiB one needs more than the default 16 MiB (e.g. 128MiB)",
    )
    args = ap.parse_args()
    code = args.daemon_code.resolve() if args.daemon_code else None
    roomy = ("--max-message-bytes", args.max_message_bytes) if args.max_message_bytes else ()
    limit = 1 << 30 if roomy else 16 * 1024 * 1024  # the client's cap, both ways
    size = args.result_kb * 1024
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        root = Path(tmp)
        if "file" in args.backends:
            print("file backend")
            (root / "file").mkdir()
            with (
                Daemon(root / "file", "file", *roomy, cwd=code) as d,
                jc.connect(str(d.socket), max_message_bytes=limit) as c,
            ):
                snap = d.data_dir / "sessions" / "reads" / "checkpoints" / "fold-snapshot.json"
                writes = FileWrites(d.data_dir)
                scenario(c, args.results, size, writes, lambda: writes.of(snap))
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
                    Daemon(root / "jsd", "jetstream", *args_js, *roomy, socket=sock, cwd=code) as d,
                    jc.connect(str(d.socket), max_message_bytes=limit) as c,
                ):
                    scenario(c, args.results, size, StreamWrites(server.url))
            finally:
                server.stop()


if __name__ == "__main__":
    os.environ.setdefault("JOURNALD_LOG_LEVEL", "WARNING")
    main()
