"""What the daemon holds and how long it takes to move a checkpoint larger than one gRPC message
(ExportCheckpointChunks / ImportCheckpointChunks, docs/design.md#export-and-import).

A coding agent reads N files of 800 KB (30: a ~24 MiB conversation), checkpoints; the client
exports the checkpoint and imports it into another run. File backend.

    nice -n 5 .venv/bin/python bench/checkpoint_transfer.py --reads 30

Prints the export's size, the wall time of the export and of the import (client side, the
bytes in the client's memory), and the daemon's VmRSS idle and after the writes, and its peak
(``VmHWM`` of /proc/PID/status) after the writes and after the export + import: the peak
since the daemon started, so the last one bounds what export + import held at once.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journald_client as jc  # noqa: E402

from tests.daemon import Daemon  # noqa: E402

FP = jc.compute(provider="anthropic", model="bench", system_prompt="s")
READ_BYTES = 800 * 1024
MIB = 1024 * 1024


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def file_text(i: int) -> str:
    line = f"# file {i}: " + "y" * 70 + "\n"
    return (line * (READ_BYTES // len(line) + 1))[:READ_BYTES]


def mem(d: Daemon, what: str) -> None:
    rss, hwm = status_kib(d.pid, "VmRSS"), status_kib(d.pid, "VmHWM")
    print(f"{what:<28} VmRSS {rss / 1024:7.1f} MiB   VmHWM {hwm / 1024:7.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=30, help="tool results of 800 KB")
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        Daemon(Path(tmp), "file") as d,
        jc.connect(str(d.socket)) as client,
    ):
        mem(d, "idle")
        with client.start("src", FP, "read the repository") as run:
            for i in range(args.reads):
                tid = f"read_{i}"
                call = {"type": "tool_use", "id": tid, "name": "read", "input": "{}"}
                run.assistant([call], stop_reason="tool_use")
                run.tool_result(tid, file_text(i))
            run.assistant("done", stop_reason="end_turn")
        with client.start("dst", FP, "elsewhere") as run:
            run.assistant("ready", stop_reason="end_turn")
        cp = client.checkpoint("src")
        mem(d, "after writes + checkpoint")
        t0 = time.perf_counter()
        data = client.export_checkpoint("src", cp.checkpoint_id)
        export_s = time.perf_counter() - t0
        mem(d, "after export")
        t0 = time.perf_counter()
        imp = client.import_checkpoint("dst", data)
        import_s = time.perf_counter() - t0
        assert imp.hash == cp.hash
        print(f"export {len(data) / MIB:.1f} MiB: {export_s:.2f} s; import {import_s:.2f} s")
        mem(d, "after export, then import")


if __name__ == "__main__":
    main()
