"""What an idle runs table of ``journald view`` costs, fed by ListChanges or polling List.

    .venv/bin/python bench/runs_idle.py --runs 300 --idle-s 20

Writes ``--runs`` small finished runs through a real daemon (file backend), then opens the
viewer headless (Textual ``run_test``, 120x40) on the runs table twice in this process: once
as shipped (the table Lists when the daemon's ListChanges stream names a change) and once
as against a daemon without ListChanges (the stream refused with ``unimplemented``, so the
table polls List, its wait doubling from 1 s to 5 s while nothing changes). For each it
samples, over ``--idle-s`` of nothing changing (the viewer's clock two hours ahead, so the
relative times stay put): the viewer process's CPU time / wall time,
the daemon's, and the Lists the table sent. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journald_client as jc  # noqa: E402
from view_open import _daemon_cpu_s, build_small_runs  # noqa: E402

from tests.daemon import Daemon  # noqa: E402


async def idle(socket: str, runs: int, idle_s: float, *, polling: bool) -> dict[str, Any]:
    from journald.view.app import ViewerApp
    from journald.view.data import RunRow, Source
    from journald.view.runs import RunsScreen

    class Counting(Source):
        lists = 0

        def runs(self) -> list[RunRow]:
            self.lists += 1
            return super().runs()

        def list_changes(self) -> jc.ListChanges:
            if polling:  # what an older daemon answers
                err = jc.JournaldError("Method not found!")
                err.code = "unimplemented"
                raise err
            return super().list_changes()

    source = Counting(socket)
    # the runs were written a moment ago; seen from two hours later their "2h ago" stays put,
    # as for the runs of a real day (a run updated seconds ago redraws its time every second)
    app = ViewerApp(source, clock=lambda: time.time() + 7200)
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 120
        while not (
            isinstance(app.screen, RunsScreen)
            and app.screen.loaded
            and len(app.screen.rows) == runs
            and (polling or app.screen.live)
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the runs table never filled")
            await pilot.pause(0.05)
        await pilot.pause(1.5)  # the Lists of the start are answered
        lists = source.lists
        c0, d0, w0 = time.process_time(), _daemon_cpu_s(), time.perf_counter()
        await pilot.pause(idle_s)
        wall = time.perf_counter() - w0
        return {
            "viewer_cpu_pct": round((time.process_time() - c0) / wall * 100, 2),
            "daemon_cpu_pct": round((_daemon_cpu_s() - d0) / wall * 100, 2),
            "lists_while_idle": source.lists - lists,
            "idle_s": round(wall, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--idle-s", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jd-runs-idle-") as tmp:
        daemon = Daemon(Path(tmp), "file", data_dir=Path(tmp) / "data")
        daemon.start()
        os.environ["JOURNALD_BENCH_DAEMON_PID"] = str(daemon.pid)
        try:
            build_small_runs(str(daemon.socket), args.runs)
            sock = str(daemon.socket)
            live = asyncio.run(idle(sock, args.runs, args.idle_s, polling=False))
            polled = asyncio.run(idle(sock, args.runs, args.idle_s, polling=True))
        finally:
            daemon.stop()
    print(
        json.dumps(
            {
                "runs": args.runs,
                "list_changes": live,
                "polling": polled,
                "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            }
        )
    )


if __name__ == "__main__":
    main()
