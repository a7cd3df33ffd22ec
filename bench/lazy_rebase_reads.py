"""What the daemon reads and holds for a restore of a checkpoint of many pages and a windowed
Open after it (docs/design.md#lazy-rebases; issue 31 item 3).

A coding agent reads N files of 128 KiB (one message page each), checkpoints, types a
follow-up and restores the checkpoint; then the daemon is restarted, the run's fold snapshot
removed (a run migrated, recovered, or whose daemon was killed before the lease end), and the
run is opened with a message window. File backend.

    .venv/bin/python bench/lazy_rebase_reads.py --pages 200
    .venv/bin/python bench/lazy_rebase_reads.py --pages 200 --daemon-code /tmp/old  # another commit

Prints the daemon's RSS (``VmRSS``) idle, after the restore, and after the windowed Open of the
restarted daemon (with the run's whole journal: the N tool turns before the restore are
records the fold reads too), the bytes it read (``rchar``) for each, and the same for a fork
of the checkpoint (a run whose journal is its meta and the rebase alone).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import journald_client as jc  # noqa: E402
from journald_client.pb import journal_pb2 as pb  # noqa: E402
from journald_client.pb import journal_pb2_grpc as pbg  # noqa: E402

from tests.daemon import Daemon  # noqa: E402

FP = jc.compute(provider="anthropic", model="bench", system_prompt="s")
RESULT_BYTES = 128 * 1024
WINDOW = 10
MIB = 1024 * 1024


def proc(pid: int, name: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/{name}")


def rss_mib(pid: int) -> float:
    return proc(pid, "status", "VmRSS:") / 1024


def rchar(pid: int) -> int:
    return proc(pid, "io", "rchar:")


def reads(client: jc.Client, run_id: str, pages: int) -> None:
    with client.start(run_id, FP, "read every file") as run:
        for i in range(pages):
            tid = f"read_{i}"
            call = {"type": "tool_use", "id": tid, "name": "read_file", "input": f'{{"i": {i}}}'}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(tid, f"file {i} " + "y" * RESULT_BYTES)
        run.assistant("I read them all.", stop_reason="end_turn")


def windowed_open(d: Daemon, run_id: str) -> int:
    channel = grpc.insecure_channel(d.target)
    s: Any = pbg.JournalServiceStub(channel)
    call = s.Open(
        pb.OpenRequest(
            run_id=run_id,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=FP.to_pb(),
            message_window=WINDOW,
        )
    )
    first = next(iter(call))
    s.Release(pb.ReleaseRequest(run_id=run_id, lease_id=first.lease.lease_id))
    call.cancel()
    channel.close()
    return len(first.lease.state.messages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--daemon-code", type=Path, default=None)
    args = ap.parse_args()
    code = args.daemon_code.resolve() if args.daemon_code else None
    roomy = ("--max-message-bytes", "128MiB")
    with tempfile.TemporaryDirectory(prefix="jd-lazy-") as tmp:
        root = Path(tmp)
        data = root / "data"
        with Daemon(root, "file", *roomy, data_dir=data, cwd=code) as d:
            idle = rss_mib(d.pid)
            with jc.connect(str(d.socket), max_message_bytes=128 * MIB) as client:
                reads(client, "reads", args.pages)
                cp = client.checkpoint("reads")
                with client.resume("reads", FP) as run:
                    run.user("now forget all that")
                before_restore, r0 = rss_mib(d.pid), rchar(d.pid)
                client.restore("reads", cp.checkpoint_id)
                restore_read, after_restore = rchar(d.pid) - r0, rss_mib(d.pid)
                f0 = rchar(d.pid)
                client.fork("reads", checkpoint_id=cp.checkpoint_id, new_run_id="forked")
                fork_read, after_fork = rchar(d.pid) - f0, rss_mib(d.pid)
        print(f"pages: {args.pages} x {RESULT_BYTES // 1024} KiB, code: {code or 'this tree'}")
        print(f"first daemon: idle RSS {idle:.1f} MiB, before restore {before_restore:.1f} MiB")
        print(f"  restore: read {restore_read / MIB:.1f} MiB, RSS after {after_restore:.1f} MiB")
        print(f"  fork:    read {fork_read / MIB:.1f} MiB, RSS after {after_fork:.1f} MiB")
        for run_id in ("reads", "forked"):
            (data / "sessions" / run_id / "checkpoints" / "fold-snapshot.json").unlink()
        for run_id in ("reads", "forked"):
            with Daemon(root, "file", *roomy, data_dir=data, cwd=code) as d:
                idle, r0 = rss_mib(d.pid), rchar(d.pid)
                got = windowed_open(d, run_id)
                read, rss = rchar(d.pid) - r0, rss_mib(d.pid)
            print(
                f"restarted, no snapshot, windowed Open ({got} messages) of {run_id}: "
                f"read {read / MIB:.1f} MiB, RSS {rss:.1f} MiB (idle {idle:.1f} MiB, "
                f"+{rss - idle:.1f} MiB)"
            )


if __name__ == "__main__":
    main()
