"""How fast ``journald view`` opens a very long run, and how much memory it takes.

    .venv/bin/python bench/view_open.py --messages 1000000 --data /tmp/jd-view-bench

1. builds run ``v<N>`` of N messages through a real daemon (file backend) once: tool turns
   (an assistant call and its result, two messages) appended in batches, one Append each;
   later invocations reuse it;
2. restarts the daemon, so nothing of the run is cached in it (the fold marks it wrote
   when the writer's lease closed are on disk, as after any real run);
3. in a fresh process, opens the viewer headless on the run (Textual ``run_test``, 100x30)
   and measures:

   * ``first_paint_s``: from starting the app to the transcript holding the run's last
     message, laid out, and one refresh after it;
   * ``page_back_at_end_s``: PgUp at the top of the last page until the page before it is
     shown;
   * ``jump_to_first_message_s``: ``home`` until the run's first message is shown;
   * ``go_to_middle_s`` and ``page_back_in_middle_s``: ``:`` N/2, then a page back there
     (a page should cost the same wherever it is);
   * ``go_to_seq_three_quarters_s`` and ``page_back_at_three_quarters_s``: ``:`` ``s`` 3N/4
     (History ``at_seq``), then a page back there;
   * History calls and messages fetched (the viewer's own counters), the messages and
     lines the window holds, the viewer process's RSS;
   * idle CPU of the viewer process over ``--idle-s`` on the transcript, then on the runs
     table with ``--runs`` small runs beside the long one (process CPU time / wall time),
     and the daemon's CPU over the same windows;
4. for scale, times ``Fold`` without messages (what the details screen asks) on the same
   run.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journald_client as jc  # noqa: E402
from journald_client import Entry  # noqa: E402

from tests.daemon import Daemon  # noqa: E402
from tests.integration.view_runs import FP  # noqa: E402

BATCH_TURNS = 2500  # 5,000 records per Append


def build(socket: str, run_id: str, messages: int, budget_s: float) -> tuple[float, int]:
    """Write the run (prompt + turns of two messages) up to ``messages``, continuing a run
    an earlier invocation left short, for at most ``budget_s``; (seconds, messages now)."""
    t0 = time.perf_counter()
    turns = max(1, (messages - 1) // 2)
    with jc.connect(socket, timeout=30) as jd:
        there = any(r.run_id == run_id for r in jd.list())
        done = (jd.history(run_id, 0, 0, stored=True).total - 1) // 2 if there else 0
        if done >= turns:
            return 0.0, 1 + 2 * done
        opened = jd.resume(run_id, FP) if there else jd.start(run_id, FP, "a very long run")
        with opened as run:
            for first in range(done, turns, BATCH_TURNS):
                if time.perf_counter() - t0 > budget_s:
                    break
                batch = []
                for i in range(first, min(turns, first + BATCH_TURNS)):
                    call = {"type": "tool_use", "id": f"c{i}", "name": "step", "input": "{}"}
                    batch.append(Entry.assistant([call], stop_reason="tool_use", iteration=i + 1))
                    batch.append(Entry.tool_result(f"c{i}", f"output of step {i}"))
                run.append_many(batch)
                done = min(turns, first + BATCH_TURNS)
    return time.perf_counter() - t0, 1 + 2 * done


def build_small_runs(socket: str, count: int) -> None:
    """``count`` small finished runs beside the long one (what the runs table lists)."""
    with jc.connect(socket, timeout=30) as jd:
        have = {r.run_id for r in jd.list()}
        for i in range(count):
            if f"small{i:04d}" not in have:
                with jd.start(f"small{i:04d}", FP, f"small run {i}") as run:
                    run.assistant(f"answer {i}", stop_reason="end_turn")
                    run.terminal("completed")


async def measure(socket: str, run_id: str, last_text: str, idle_s: float) -> dict[str, Any]:
    from journald.view.app import ViewerApp
    from journald.view.data import Source
    from journald.view.runs import RunsScreen
    from journald.view.transcript_screen import TranscriptScreen

    source = Source(socket)
    app = ViewerApp(source, run_id)
    deadline = time.monotonic() + 600

    def screen() -> TranscriptScreen | None:
        s = app.screen
        return s if isinstance(s, TranscriptScreen) and s.slice is not None else None

    async def until(cond: Any, what: str) -> None:
        while not cond():
            if time.monotonic() > deadline:
                raise SystemExit(f"never: {what}")
            await pilot.pause(0.005)
        await pilot.pause()  # one refresh after it: laid out and painted

    t0 = time.perf_counter()
    async with app.run_test(size=(100, 30)) as pilot:
        await until(
            lambda: (s := screen()) and any(last_text in t for t in s.view.line_texts()),
            "the last message",
        )
        first_paint = time.perf_counter() - t0
        s = screen()
        assert s is not None
        assert s.slice is not None
        calls, fetched = source.stats.history_calls, source.stats.messages_fetched
        total = s.slice.total

        async def page_back() -> float:
            assert s is not None
            assert s.slice is not None
            start = s.slice.start
            s.view.go_first()  # the top of what is loaded (untimed): the next PgUp reads
            await pilot.pause()
            t = time.perf_counter()
            await pilot.press("pageup")
            await until(lambda: s.slice is not None and s.slice.start < start, "a page back")
            return time.perf_counter() - t

        back_at_end = await page_back()
        t1 = time.perf_counter()
        await pilot.press("home")
        await until(
            lambda: (
                s.slice is not None
                and s.slice.start == 0
                and any("a very long run" in t for t in s.view.line_texts())
            ),
            "the first message",
        )
        to_first = time.perf_counter() - t1
        t2 = time.perf_counter()
        middle = total // 2
        await pilot.press("colon", *str(middle), "enter")
        await until(
            lambda: s.slice is not None and s.slice.start <= middle - 1 < s.slice.stop,
            "the middle",
        )
        to_middle = time.perf_counter() - t2
        back_in_middle = await page_back()
        to_seq: float | None = None
        back_at_three_quarters: float | None = None
        if importlib.util.find_spec("journald.view.goto") is not None:  # (a viewer before it)
            # seq k is message k - 1 in this run (the prompt is seq 1, then a message a record)
            seq = total * 3 // 4
            t3 = time.perf_counter()
            await pilot.press("colon", *f"s {seq}", "enter")
            await until(
                lambda: s.slice is not None and s.slice.start <= seq - 1 < s.slice.stop,
                "seq 3/4 through",
            )
            to_seq = time.perf_counter() - t3
            back_at_three_quarters = await page_back()  # History's own page there
        rss_mb = _rss_mb()
        loaded = len(s.slice.messages)
        lines = len(s.view.line_texts())

        c0, d0, w0 = time.process_time(), _daemon_cpu_s(), time.perf_counter()
        await pilot.pause(idle_s)
        wall = time.perf_counter() - w0
        idle_transcript = (time.process_time() - c0) / wall
        daemon_transcript = (_daemon_cpu_s() - d0) / wall
        await pilot.press("escape")
        await until(lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, "the runs")
        runs_listed = len(app.screen.rows) if isinstance(app.screen, RunsScreen) else 0
        await pilot.pause(0.5)
        c0, d0, w0 = time.process_time(), _daemon_cpu_s(), time.perf_counter()
        await pilot.pause(idle_s)
        wall = time.perf_counter() - w0
        idle_runs = (time.process_time() - c0) / wall
        daemon_runs = (_daemon_cpu_s() - d0) / wall
        return {
            "messages_in_run": total,
            "first_paint_s": round(first_paint, 3),
            "history_calls_to_first_paint": calls,
            "messages_fetched_to_first_paint": fetched,
            "page_back_at_end_s": round(back_at_end, 3),
            "jump_to_first_message_s": round(to_first, 3),
            "go_to_middle_s": round(to_middle, 3),
            "page_back_in_middle_s": round(back_in_middle, 3),
            "go_to_seq_three_quarters_s": _round(to_seq),
            "page_back_at_three_quarters_s": _round(back_at_three_quarters),
            "messages_held_in_window": loaded,
            "lines_laid_out": lines,
            "viewer_rss_mb": rss_mb,
            "viewer_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "idle_cpu_transcript_pct": round(idle_transcript * 100, 1),
            "idle_cpu_runs_table_pct": round(idle_runs * 100, 1),
            "runs_in_table": runs_listed,
            "daemon_cpu_while_transcript_idle_pct": round(daemon_transcript * 100, 1),
            "daemon_cpu_while_runs_table_idle_pct": round(daemon_runs * 100, 1),
            "history_calls_total": source.stats.history_calls,
        }


def _round(s: float | None) -> float | None:
    return None if s is None else round(s, 3)


def _daemon_cpu_s() -> float:
    """CPU seconds the daemon has used (user + system; 0 when its pid is not known)."""
    pid = os.environ.get("JOURNALD_BENCH_DAEMON_PID", "")
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--data", type=Path, default=Path("/tmp/jd-view-bench"))
    ap.add_argument("--idle-s", type=float, default=20.0, help="idle CPU sampled this long")
    ap.add_argument("--runs", type=int, default=300, help="small runs beside the long one")
    ap.add_argument(
        "--build-budget-s",
        type=float,
        default=240.0,
        help="stop building after this long (run again to continue a long build)",
    )
    ap.add_argument(
        "--measure", nargs=4, metavar=("SOCKET", "RUN", "LAST", "IDLE"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.measure:
        sock, run, last, idle = args.measure
        print(json.dumps(asyncio.run(measure(sock, run, last, float(idle)))))
        return
    run_id = f"v{args.messages}"
    args.data.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(args.data, "file", data_dir=args.data / "data")
    daemon.start()
    try:
        build_small_runs(str(daemon.socket), args.runs)
        built_s, have = build(str(daemon.socket), run_id, args.messages, args.build_budget_s)
        if have < args.messages - 1:
            print(
                json.dumps(
                    {
                        "built": f"{have:,} of {args.messages:,} messages in {built_s:.0f} s",
                        "next": "run again with the same --data to continue the build",
                        "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                    }
                )
            )
            return
        daemon.stop()
        daemon.start()  # nothing of the run cached in the daemon
        turns = max(1, (args.messages - 1) // 2)
        last = f"output of step {turns - 1}"
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--measure",
                str(daemon.socket),
                run_id,
                last,
                str(args.idle_s),
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "JOURNALD_BENCH_DAEMON_PID": str(daemon.pid)},
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        with jc.connect(str(daemon.socket), timeout=30) as jd:
            t0 = time.perf_counter()
            jd.fold(run_id, messages=False)
            result["fold_without_messages_s"] = round(time.perf_counter() - t0, 3)
            info = next(r for r in jd.list() if r.run_id == run_id)
            result["run_bytes"] = info.bytes
            result["run_records"] = info.record_count
        result["build_s"] = round(built_s, 1) if built_s else "reused"
        result["loadavg"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(json.dumps(result, indent=2))
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
