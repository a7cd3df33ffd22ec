"""How fast ``journald view`` opens a very long run, and how much memory it takes.

    .venv/bin/python bench/view_open.py --messages 1000000 --data /tmp/jd-view-bench

1. builds run ``v<N>`` of N messages through a real daemon (file backend): tool turns (an
   assistant call and its result, two messages) appended in batches, one Append each. The
   build stops after ``--build-budget-s`` and says so; run the same command again (same
   ``--data``) to continue it where it stopped (the 1M run takes a few invocations); once
   built, later invocations reuse it (and the ``--runs`` small runs) and only measure;
2. restarts the daemon, so nothing of the run is cached in it (the fold marks it wrote
   when the writer's lease closed are on disk, as after any real run);
3. in a fresh process, opens the viewer headless on the run (Textual ``run_test``, 100x30)
   and measures:

   * ``transcript_mounted_s``: from starting the app to its transcript screen (nothing of
     the run read yet: the app's own start);
   * ``first_paint_s``: from starting the app to the run's last message *on screen* with
     the view following the end (not merely laid out somewhere above), and one refresh;
   * ``page_back_at_end_s``: PgUp at the top of the last page until the page before it is
     loaded;
   * ``jump_to_first_message_s``: ``home`` (from the end) until the run's first message is
     on screen;
   * ``go_to_middle_s`` and ``page_back_in_middle_s``: ``:`` N/2, then a page back there
     (a page should cost the same wherever it is);
   * ``go_to_seq_three_quarters_s`` and ``page_back_at_three_quarters_s``: ``:`` ``s`` 3N/4
     (History ``at_seq``), then a page back there;
   * History calls and messages fetched (the viewer's own counters), the messages and
     lines the window holds, the viewer process's RSS;
   * idle CPU of the viewer process over ``--idle-s`` on the transcript, then on the runs
     table with ``--runs`` small runs beside the long one (process CPU time / wall time),
     and the daemon's CPU over the same windows;
   * ``open_from_runs_table_s``: enter on the run's row until its last message is on
     screen, following (the daemon warm by then);

   each step gives up after ``--step-timeout-s``: the JSON then names it in ``timed_out``
   and holds the figures before it (the moves after it are skipped);
4. for scale, times ``Fold`` without messages (what the details screen asks) on the same
   run.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
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
        info = next((r for r in jd.list() if r.run_id == run_id), None)
        there = info is not None
        # a record a message (the prompt is seq 1) and whole turns per Append: the last seq
        # says how far an earlier invocation got, without a History of a long run
        done = (info.last_seq - 1) // 2 if info is not None else 0
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
                if done % (20 * BATCH_TURNS) == 0:
                    took = time.perf_counter() - t0
                    print(f"built {1 + 2 * done:,} messages ({took:.0f} s)", file=sys.stderr)
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


class StepTimeout(Exception):
    """A step did not finish within ``--step-timeout-s``: the figures so far are printed."""


def on_screen(view: Any) -> list[str]:
    """The transcript's lines the terminal shows now (not every laid-out line)."""
    y = int(view.scroll_y)
    lines: list[str] = view.line_texts()
    return lines[y : y + view.scrollable_content_region.height]


async def measure(
    socket: str, run_id: str, last_text: str, idle_s: float, step_s: float
) -> dict[str, Any]:
    from journald.view.app import ViewerApp
    from journald.view.data import Source
    from journald.view.runs import RunsScreen
    from journald.view.transcript_screen import TranscriptScreen

    source = Source(socket)
    app = ViewerApp(source, run_id)
    out: dict[str, Any] = {}

    def screen() -> TranscriptScreen | None:
        s = app.screen
        return s if isinstance(s, TranscriptScreen) and s.slice is not None else None

    def at_end(s: TranscriptScreen | None) -> bool:
        """The run's last message on screen and the view following the end (the issue's
        "lands at the top of its last page" is not an open at the end)."""
        return s is not None and s.view.at_bottom and any(last_text in t for t in on_screen(s.view))

    async def until(cond: Any, what: str) -> None:
        deadline = time.monotonic() + step_s
        while not cond():
            if time.monotonic() > deadline:
                raise StepTimeout(what)
            await pilot.pause(0.005)
        await pilot.pause()  # one refresh after it: laid out and painted

    t0 = time.perf_counter()
    async with app.run_test(size=(100, 30)) as pilot:
        try:
            try:
                await until(lambda: isinstance(app.screen, TranscriptScreen), "the screen")
                out["transcript_mounted_s"] = round(time.perf_counter() - t0, 3)
                await until(lambda: at_end(screen()), "the last message on screen")
                out["first_paint_s"] = round(time.perf_counter() - t0, 3)
            except StepTimeout as err:
                out["timed_out"] = str(err)
                return out
            s = screen()
            assert s is not None
            assert s.slice is not None
            out["history_calls_to_first_paint"] = source.stats.history_calls
            out["messages_fetched_to_first_paint"] = source.stats.messages_fetched
            total = out["messages_in_run"] = s.slice.total

            async def page_back() -> float:
                assert s is not None
                assert s.slice is not None
                start = s.slice.start
                s.view.go_first()  # the top of what is loaded (untimed): the next PgUp reads
                await pilot.pause()
                t = time.perf_counter()
                await pilot.press("pageup")
                await until(lambda: s.slice is not None and s.slice.start < start, "a page back")
                return round(time.perf_counter() - t, 3)

            async def timed(key: str, *keys: str, cond: Any) -> None:
                t = time.perf_counter()
                await pilot.press(*keys)
                await until(cond, key)
                out[key] = round(time.perf_counter() - t, 3)

            def shows_first() -> bool:
                return (
                    s.slice is not None
                    and s.slice.start == 0
                    and any("a very long run" in t for t in on_screen(s.view))
                )

            middle = total // 2
            seq = total * 3 // 4  # seq k is message k - 1 here (the prompt is seq 1)
            try:  # the moves the issue asks for first, then the ones across the run
                out["page_back_at_end_s"] = await page_back()
                await timed("jump_to_first_message_s", "home", cond=shows_first)
                await timed(
                    "go_to_middle_s",
                    "colon",
                    *str(middle),
                    "enter",
                    cond=lambda: s.slice is not None and s.slice.start <= middle - 1 < s.slice.stop,
                )
                out["page_back_in_middle_s"] = await page_back()
                await timed(
                    "go_to_seq_three_quarters_s",
                    "colon",
                    *f"s {seq}",
                    "enter",
                    cond=lambda: s.slice is not None and s.slice.start <= seq - 1 < s.slice.stop,
                )
                out["page_back_at_three_quarters_s"] = await page_back()  # History's own page
            except StepTimeout as err:  # the rest of the moves would start from anywhere
                out["timed_out"] = f"{err} (after {step_s:g} s; the moves after it were skipped)"
            out["messages_held_in_window"] = len(s.slice.messages) if s.slice is not None else 0
            out["lines_laid_out"] = len(s.view.line_texts())
            out["viewer_rss_mb"] = _rss_mb()

            c0, d0, w0 = time.process_time(), _daemon_cpu_s(), time.perf_counter()
            await pilot.pause(idle_s)
            wall = time.perf_counter() - w0
            out["idle_cpu_transcript_pct"] = round((time.process_time() - c0) / wall * 100, 1)
            out["daemon_cpu_while_transcript_idle_pct"] = round(
                (_daemon_cpu_s() - d0) / wall * 100, 1
            )
            await pilot.press("escape")
            await until(
                lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, "the runs"
            )
            runs = app.screen
            assert isinstance(runs, RunsScreen)
            out["runs_in_table"] = len(runs.rows)
            await pilot.pause(0.5)
            c0, d0, w0 = time.process_time(), _daemon_cpu_s(), time.perf_counter()
            await pilot.pause(idle_s)
            wall = time.perf_counter() - w0
            out["idle_cpu_runs_table_pct"] = round((time.process_time() - c0) / wall * 100, 1)
            out["daemon_cpu_while_runs_table_idle_pct"] = round(
                (_daemon_cpu_s() - d0) / wall * 100, 1
            )

            # the way people open a run: enter on its row of the runs table (the daemon warm now)
            row = next(n for n, r in enumerate(runs.shown) if r.info.run_id == run_id)
            runs.table.move_cursor(row=row, animate=False)
            await pilot.pause()
            try:
                await timed(
                    "open_from_runs_table_s",
                    "enter",
                    cond=lambda: (t := screen()) is not None and t is not s and at_end(t),
                )
            except StepTimeout as err:
                out["timed_out_from_runs_table"] = str(err)
            out["viewer_max_rss_mb"] = round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            )
            out["history_calls_total"] = source.stats.history_calls
        finally:
            # printed here, before the app winds down: a step that timed out may leave a
            # History call running in a worker thread, which the orderly exit would wait for
            print(json.dumps(out), flush=True)
            if any(k.startswith("timed_out") for k in out):
                os._exit(0)
        return out


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
        "--step-timeout-s",
        type=float,
        default=600.0,
        help="give up on one viewer step after this long (the figures so far are printed)",
    )
    ap.add_argument(
        "--measure",
        nargs=5,
        metavar=("SOCKET", "RUN", "LAST", "IDLE", "STEP"),
        help=argparse.SUPPRESS,
    )
    args = ap.parse_args()
    if args.measure:
        sock, run, last, idle, step = args.measure
        asyncio.run(measure(sock, run, last, float(idle), float(step)))  # prints its JSON
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
        argv = [sys.executable, __file__, "--measure", str(daemon.socket), run_id, last]
        out = subprocess.run(
            [*argv, str(args.idle_s), str(args.step_timeout_s)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "JOURNALD_BENCH_DAEMON_PID": str(daemon.pid)},
        )
        if out.returncode != 0 or not out.stdout.strip():
            sys.stderr.write(out.stderr[-4000:])
            raise SystemExit(f"the viewer's measurement failed (exit {out.returncode})")
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
