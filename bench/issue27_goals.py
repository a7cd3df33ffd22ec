"""Every goal of issue 27, before and after, in one run: the goal scripts one after the other
against this tree's daemon and an older tree's, their figures gathered into one table.

    git archive 7b0db43 journald bench tests clients/python/journald_client | tar -x -C /tmp/b
    git archive 7b0db43 proto/python/journald_proto | tar -x -C /tmp/b
    mv /tmp/b/proto/python/journald_proto /tmp/b/
    .venv/bin/python bench/issue27_goals.py --before /tmp/b --out /tmp/goals   # ~25 minutes

The steps (each a script of its own, which says how it measures):

1. ``cpu_per_record.py``: the daemon's CPU per record (unary, a 16-record Append, the Python
   pipelined writer) beside the no-op echo's CPU per call, and the Python client's own CPU
   per unary append beside a bare stub call's (the before tree's client against its daemon);
2. ``record_work.py --append``: the record's own Python work per record in process, and the
   servicer's whole ``_append`` of 16-record batches in process (no gRPC);
3. ``agents_at_16.py``: 16 agent processes, pipelined against SQLite FULL and unary against
   the echo;
4. ``unary_p50_goal.py``: the unary Append p50 against echo p50 + write+fdatasync p50;
5. ``js_append_goal.py --floor``: the JetStream Append p50 against direct publish + echo,
   with the publish-only and no-publish daemons (the design's floor);
6. ``unary_ablation.py``: the unary Append with one piece switched off per variant (the
   hops and the servicer's parts), beside the echo, 3 rounds interleaved;
7. ``many_leases.py --mode both``: 10,000 leases (capped by the fd limit) held as an ``Open``
   stream each on the before daemon (it predates the ``Leases`` RPC), then on this tree's
   daemon both as an ``Open`` each and over ``Leases`` streams;
8. with ``--perf``: ``perf record`` of the loop thread under unary, batch and pipelined, its
   summary in ``bench/profiles/<tag>*-perf.txt`` (after the measured steps: perf slows what
   it watches).

Writes ``<out>/goals.json`` (every script's figures) and ``<out>/goals.md`` (the table) and
prints the table. Every process is started and stopped by the step scripts, by pid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT

BENCH = ROOT / "bench"
STEP_TIMEOUT_S = 3600
ABLATION = (
    "full,echo-in-daemon,noop,servicer-off,memory,no-write,no-fdatasync,answer-first,"
    "aio-off,no-schema,no-admit-fold,no-seal,no-budget"
)
"""The unary ablation's variants re-measured in the sitting: what each hop and piece of the
unary path costs now (bench/unary_ablation.py prints the table into ``<out>/ablation.log``)."""


def steps(args: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    before = str(args.before.resolve())
    s = str(args.seconds)
    return {
        "cpu": [
            "cpu_per_record.py",
            *("--before", before, "--seconds", s, "--json", str(out / "cpu.json")),
            *("--modes", "fdatasync,echo,echo-batch,unary,batch,pipelined,client-unary"),
        ],
        "work": ["record_work.py", "--append", "--json", str(out / "work.json")],
        "agents": [
            "agents_at_16.py",
            *("--before", before, "--seconds", "3", "--json", str(out / "agents.json")),
        ],
        "p50": [
            "unary_p50_goal.py",
            *("--before", before, "--rounds", str(args.rounds), "--json", str(out / "p50.json")),
        ],
        "js": [
            "js_append_goal.py",
            *("--before", before, "--rounds", str(args.rounds), "--floor"),
            *("--json", str(out / "js.json")),
        ],
        "ablation": [
            "unary_ablation.py",
            *("--variants", ABLATION, "--rounds", "3", "--seconds", "4"),
        ],
        "leases": [
            "many_leases.py",
            *("--before", before, "--leases", str(args.leases), "--seconds", "3"),
            *("--mode", "both", "--json", str(out / "leases.json")),
        ],
    }


def run_step(name: str, argv: list[str], out: Path) -> None:
    t0 = time.perf_counter()
    print(f"== {name}: {' '.join(argv)}", file=sys.stderr, flush=True)
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.run(
            [sys.executable, str(BENCH / argv[0]), *argv[1:]],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
    took = time.perf_counter() - t0
    print(f"   {name}: exit {proc.returncode} in {took:.0f} s", file=sys.stderr, flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"step {name} failed: see {out / (name + '.log')}")


def load(out: Path) -> dict[str, Any]:
    return {n: json.loads((out / f"{n}.json").read_text()) for n in steps_names()}


def steps_names() -> tuple[str, ...]:
    """The steps whose figures the table reads (the ablation's stay in its log)."""
    return ("cpu", "work", "agents", "p50", "js", "leases")


def batch_floor(f: dict[str, Any]) -> str:
    """What a 16-record Append costs at the least: gRPC's share of the call (a 16 KB request
    with an empty answer, ``echo-batch``, over 16 records) and the record's own Python work
    in process, against the goal's budget (0.15 x the 1 KB echo's CPU per call)."""
    modes, work = f["cpu"]["modes"], f["work"]
    echo_us = f["cpu"]["echo_cpu_per_call_us"]
    grpc_us = modes["echo-batch"]["server_cpu_per_record_us"] / work["batch"]
    budget = 0.15 * echo_us
    floor = grpc_us + work["record_work_us"]
    return (
        f"16-record Append: budget 0.15 x {echo_us:,.0f} = {budget:,.0f} µs a record; gRPC's "
        f"share of the call {grpc_us:,.0f} µs + the record's own work {work['record_work_us']:,.1f}"
        f" µs = {floor:,.0f} µs ({floor / echo_us:.2f}x the echo) before anything else; the "
        f"servicer's whole _append in process {work.get('append_us', float('nan')):,.1f} µs; "
        f"the daemon {modes['batch']['server_cpu_per_record_us']:,.0f} µs\n"
    )


def bounds(f: dict[str, Any]) -> str:
    """Why the 16-agent goals stand where they do: the server's CPUs in use inside each
    system's window (agents_at_16.py samples /proc), its CPU per record there, and what the
    goal's rate would need of one event loop."""
    rows = f["agents"]["cpu"]
    lines = ["16 agent processes: where the CPU goes (inside each window):"]
    for name, row in rows.items():
        if "daemon_cpus" not in row or name == "sqlite FULL":
            lines.append(
                f"  {name}: {row['rate']:,.0f} rec/s, machine {row['machine_busy']:.0%} busy"
            )
            continue
        per_us = row["daemon_cpus"] / row["rate"] * 1e6 if row["rate"] else float("nan")
        lines.append(
            f"  {name}: {row['rate']:,.0f} rec/s, server {row['daemon_cpus']:.2f} CPUs "
            f"(loop thread {row['loop_cpus']:.2f}), machine {row['machine_busy']:.0%} busy: "
            f"{per_us:,.0f} µs of server CPU a record"
        )
    rates = f["agents"]["records_per_s"]
    for system, ref, goal in (("stream", "sqlite FULL", 2.0), ("unary", "echo", 0.8)):
        need = goal * rates[ref]
        lines.append(
            f"  {system} at {goal:g}x {ref} is {need:,.0f} rec/s: one event loop on one CPU "
            f"would have to spend at most {1e6 / need:,.0f} µs a record"
        )
    return "\n".join(lines) + "\n"


def table(f: dict[str, Any]) -> str:
    """The goals as a markdown table: before, after, limit, and met or missed by how much."""
    cpu, modes = f["cpu"], f["cpu"]["modes"]
    held = {k: v["held_after_bench"] for k, v in f["leases"].items()}
    leases = f["leases"]["multiplexed"]["leases"]
    rows: list[tuple[str, str, str, float, str, float]] = []  # goal, before, after, limit, op, x

    def ratio_row(goal: str, before: float, after: float, op: str, limit: float) -> None:
        rows.append((goal, f"{before:.2f}", f"{after:.2f}", limit, op, after))

    def cpu_row(goal: str, mode: str, limit: float) -> None:
        b, a = modes[f"{mode} (before)"], modes[mode]
        rows.append(
            (
                goal,
                f"{b['vs_echo_cpu_per_call']:.2f} ({b['server_cpu_per_record_us']:,.0f} µs)",
                f"{a['vs_echo_cpu_per_call']:.2f} ({a['server_cpu_per_record_us']:,.0f} µs)",
                limit,
                "<=",
                a["vs_echo_cpu_per_call"],
            )
        )

    echo_us = cpu["echo_cpu_per_call_us"]
    cpu_row(f"daemon CPU per record, unary ÷ echo CPU per call ({echo_us:,.0f} µs)", "unary", 1.5)
    cpu_row("the same, Append of 16 records", "batch", 0.15)
    cpu_row("the same, pipelined stream (Python writer, window 16)", "pipelined", 0.4)
    ag = f["agents"]["goals"]
    sqlite = f["agents"]["records_per_s"]["sqlite FULL"]
    echo16 = f["agents"]["records_per_s"]["echo"]
    for goal, key, limit in (
        (f"16 agent processes: pipelined ÷ SQLite FULL records/s ({sqlite:,.0f})",
         "stream_vs_sqlite_full", 2.0),
        (f"16 agent processes: unary ÷ echo calls/s ({echo16:,.0f})", "unary_vs_echo", 0.8),
    ):  # fmt: skip
        ratio_row(goal, ag["before"][key], ag["after"][key], ">=", limit)
    p50 = f["p50"]
    n = len(p50["after"]["rounds"])
    ratio_row(
        f"unary Append p50 ÷ (echo p50 + write+fdatasync p50), median of {n} rounds",
        p50["before"]["median"],
        p50["after"]["median"],
        "<=",
        1.25,
    )
    b, m, o = held["per-run (before)"], held["multiplexed"], held["per-run"]
    rows.append(
        (
            f"{leases:,} open leases: RSS MB (before: an `Open` stream each, the only way; "
            "after: `Leases` streams)",
            f"{b['rss_mb']:.0f}",
            f"{m['rss_mb']:.0f}",
            300,
            "<=",
            m["rss_mb"],
        )
    )
    rows.append(
        ("the same leases as an `Open` stream each: RSS MB", f"{b['rss_mb']:.0f}",
         f"{o['rss_mb']:.0f}", 300, "<=", o["rss_mb"])
    )  # fmt: skip
    rows.append(
        ("threads with them held (after: `Leases`; `Open` each)", f"{b['threads']:.0f}",
         f"{m['threads']:.0f}; {o['threads']:.0f}", 64, "<=", max(m["threads"], o["threads"]))
    )  # fmt: skip
    lb, lm, lo = (f["leases"][k]["ratio"] for k in ("per-run (before)", "multiplexed", "per-run"))
    rows.append(
        ("16-run append alone ÷ beside them (after: `Leases`; `Open` each)", f"{lb:.2f}",
         f"{lm:.2f}; {lo:.2f}", 1.2, "<=", max(lm, lo))
    )  # fmt: skip
    cl = cpu["client_vs_stub"]
    goal = "Python client CPU per unary append ÷ a bare stub call"
    ratio_row(goal, cl["before"], cl["after"], "<=", 1.5)
    js = f["js"]
    floor = js.get("publish-only", {}).get("median")
    ratio_row(
        "JetStream Append p50 ÷ (direct publish p50 + echo p50), median"
        + (f" (publish-only floor {floor:.2f})" if floor else ""),
        js["before"]["median"],
        js["after"]["median"],
        "<=",
        1.25,
    )
    lines = ["| goal | before | after | limit | met |", "|---|---:|---:|---:|---|"]
    for goal, bt, at, limit, op, x in rows:
        met = x <= limit if op == "<=" else x >= limit
        by = x / limit if op == "<=" else limit / x
        verdict = "met" if met else f"missed by {by:.2f}×"
        sign = "≤" if op == "<=" else "≥"
        lines.append(f"| {goal} | {bt} | {at} | {sign} {limit:g} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="the older tree (see above)")
    ap.add_argument("--out", type=Path, required=True, help="a directory for the figures")
    ap.add_argument("--seconds", type=float, default=5.0, help="per CPU mode")
    ap.add_argument("--rounds", type=int, default=5, help="p50 rounds (unary and JetStream)")
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--only", default="", help="steps to run (comma separated; default all)")
    ap.add_argument("--table-only", action="store_true", help="re-print from <out>/*.json")
    ap.add_argument("--perf", default="", help="after the steps: perf of the loop, this tag")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        every = steps(args, args.out)
        chosen = {s for s in args.only.split(",") if s} or set(every)
        for name, argv in every.items():
            if name in chosen:
                run_step(name, argv, args.out)
        if args.perf:
            run_step(
                "perf",
                [
                    "cpu_per_record.py",
                    *("--seconds", "4", "--modes", "echo,unary,batch,pipelined"),
                    *("--perf", "echo,unary,batch,pipelined", "--tag", args.perf),
                ],
                args.out,
            )
    figures = load(args.out)
    text = table(figures) + "\n" + bounds(figures) + "\n" + batch_floor(figures)
    (args.out / "goals.json").write_text(json.dumps(figures, indent=1))
    (args.out / "goals.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
