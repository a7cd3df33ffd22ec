"""Turn bench/run_all.py's results into docs/benchmarks.md and its PNG plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

LABELS: dict[str, str] = {
    "raw": "raw write+fdatasync (N files, N threads)",
    "echo": "gRPC no-op echo (own servicer)",
    "inproc": "journald in-process FileStore.append",
    "unary": "journald daemon, unary Append (1 record)",
    "batch": "journald daemon, Append of 16 records",
    "stream": "journald daemon, pipelined AppendStream (1 record/msg, 16 in flight)",
    "js-unary": "journald daemon on JetStream, unary Append",
    "nats": "direct nats-py js.publish (same stream)",
    "sqlite": "SQLite WAL synchronous=FULL, insert+commit",
    "sqlitesaver": "LangGraph SqliteSaver.put",
    "sqlitesession": "OpenAI Agents SQLiteSession.add_items",
}
ORDER = list(LABELS)
# (color, line style): limits dashed grey/black, journald solid, alternatives dotted
STYLE: dict[str, tuple[str, str]] = {
    "raw": ("black", "--"),
    "echo": ("grey", "--"),
    "inproc": ("tab:green", "-"),
    "unary": ("tab:red", "-"),
    "batch": ("tab:purple", "-"),
    "stream": ("tab:brown", "-"),
    "js-unary": ("tab:pink", "-"),
    "nats": ("tab:pink", "--"),
    "sqlite": ("tab:blue", ":"),
    "sqlitesaver": ("tab:orange", ":"),
    "sqlitesession": ("tab:cyan", ":"),
}

# What History did when this report's run was made (checked against the code of that run).
HISTORY_WHY = (
    "`History` of a run without a lease reads the run's fold snapshot (saved at every lease "
    "end) and the message pages the page needs, and folds only the records after the "
    "snapshot. A run never opened by a writer (written outside the daemon, as these were) "
    "has no snapshot: each daemon's first read of it folds it in full (reads never write), "
    "until its first writer's lease end indexes it, the two calls shown apart in the table."
)


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def row(results: dict[str, Any], system: str, n: int) -> dict[str, Any] | None:
    r = results["rows"].get(f"{system}@{n}")
    return r if r and not r.get("error") else None


def goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal figure of issue 9, computed from this run's rows: (goal, measured, limit,
    ratio, met). ``ratio`` is measured / limit for "<=" goals and limit / measured for ">="."""
    out: list[dict[str, Any]] = []

    def add(
        goal: str, measured: float | None, limit: float | None, le: bool, note: str = ""
    ) -> None:
        if measured is None or limit is None or math.isnan(measured) or math.isnan(limit):
            out.append({"goal": goal, "measured": None, "limit": None, "met": None, "note": note})
            return
        met = measured <= limit if le else measured >= limit
        ratio = (measured / limit) if limit else float("nan")
        out.append(
            {
                "goal": goal,
                "measured": measured,
                "limit": limit,
                "ratio": ratio,
                "met": met,
                "le": le,
                "note": note,
            }
        )

    def get(system: str, n: int, key: str) -> float | None:
        r = row(res, system, n)
        return None if r is None else float(r[key])

    u1, e1, raw1 = get("unary", 1, "p50_ms"), get("echo", 1, "p50_ms"), get("raw", 1, "p50_ms")
    floor = (e1 + raw1) if e1 is not None and raw1 is not None else None
    add(
        "unary Append p50 <= 1.25 x (echo p50 + raw fdatasync p50) [ms]",
        u1,
        None if floor is None else 1.25 * floor,
        True,
    )
    add(
        "unary Append p99 <= 3 x its p50 [ms]",
        get("unary", 1, "p99_ms"),
        None if u1 is None else 3 * u1,
        True,
    )
    top = max(res["config"]["concurrency"])
    e64 = get("echo", top, "rate")
    add(
        f"unary at {top} runs >= 0.8 x echo throughput at {top} in flight [rec/s]",
        get("unary", top, "rate"),
        None if e64 is None else 0.8 * e64,
        False,
    )
    rawn = get("raw", top, "rate")
    lim = None if rawn is None else min(10_000.0, 0.5 * rawn)
    for form in ("batch", "stream"):
        add(
            f"{form} at {top} runs >= min(10,000, 0.5 x raw {top}-file fdatasync rate) [rec/s]",
            get(form, top, "rate"),
            lim,
            False,
        )
    if 16 in res["config"]["concurrency"]:
        s16 = get("sqlite", 16, "rate")
        add(
            "16 agent processes: unary throughput >= SQLite FULL's [rec/s]",
            get("unary", 16, "rate"),
            s16,
            False,
        )
        add(
            "16 agent processes: unary p99 < SQLite FULL's p99 [ms]",
            get("unary", 16, "p99_ms"),
            get("sqlite", 16, "p99_ms"),
            True,
        )
        for form in ("batch", "stream"):
            add(
                f"16 agent processes: {form} >= 2 x SQLite FULL [rec/s]",
                get(form, 16, "rate"),
                None if s16 is None else 2 * s16,
                False,
            )
    for alt in ("sqlitesaver", "sqlitesession"):
        for form in ("unary", "batch", "stream"):
            for n in res["config"]["alt_concurrency"]:
                a = get(alt, n, "rate")
                add(
                    f"{form} at {n} >= 2 x {alt} at {n} [rec/s]",
                    get(form, n, "rate"),
                    None if a is None else 2 * a,
                    False,
                )
    opens = {o["records"]: o for o in res.get("resume", {}).get("open", [])}
    o10 = opens.get(10_000)
    add(
        "Open of a 10k-record run <= 2 x read+JSON-parse of its files [ms]",
        None if o10 is None else o10["open_ms"],
        None if o10 is None else 2 * o10["parse_ms"],
        True,
    )
    windowed = res.get("resume", {}).get("open_window", [])
    if len(windowed) >= 2:
        small = min(windowed, key=lambda o: o["records"])
        big = max(windowed, key=lambda o: o["records"])
        add(
            f"windowed Open at {big['records']:,} records <= 1.5 x at {small['records']:,} [ms]",
            big["open_ms"],
            1.5 * small["open_ms"],
            True,
            "" if big["records"] >= 900_000 else "largest size measured (goal: 1M)",
        )
    hist = res.get("resume", {}).get("history", [])
    if hist:
        small = min(hist, key=lambda h: h["messages"])
        big = max(hist, key=lambda h: h["messages"])
        add(
            f"History tail page (restarted daemon, after the run's first fold) at "
            f"{big['messages']:,} messages <= 1.5 x at "
            f"{small['messages']:,} [ms]",
            big["page_ms"],
            1.5 * small["page_ms"],
            True,
            "" if big["messages"] >= 900_000 else "largest size measured (see History)",
        )
    for key, how in (("memory", ""), ("memory_multiplexed", " over Leases streams")):
        mem = res.get(key)
        if not mem or "held" not in mem:
            continue
        held = mem["held_after_bench"]
        n = f"{mem['leases']:,} open leases{how}"
        add(f"daemon threads with {n} <= 64", held["threads"], 64.0, True)
        add(f"daemon RSS with {n} <= 300 MB [MB]", held["rss_mb"], 300.0, True)
        add(
            f"16-run unary Append alone <= 1.2 x beside {n} [rec/s ratio]",
            mem["ratio"],
            1.2,
            True,
        )
    js1, n1 = get("js-unary", 1, "p50_ms"), get("nats", 1, "p50_ms")
    add(
        "JetStream Append p50 <= 1.25 x (direct publish p50 + echo p50) [ms]",
        js1,
        None if n1 is None or e1 is None else 1.25 * (n1 + e1),
        True,
    )
    return out


def throughput_table(res: dict[str, Any]) -> list[str]:
    conc = sorted({int(k.split("@")[1]) for k in res["rows"]})
    lines = [
        "| system | " + " | ".join(f"{n} × rec/s (p50 / p99 ms)" for n in conc) + " |",
        "|---|" + "---|" * len(conc),
    ]
    for system in ORDER:
        cells = []
        seen = False
        for n in conc:
            r = res["rows"].get(f"{system}@{n}")
            if r is None:
                cells.append("–")
            elif r.get("error"):
                seen = True
                cells.append("failed")
            else:
                seen = True
                cells.append(f"**{r['rate']:,.0f}** ({r['p50_ms']:.2f} / {r['p99_ms']:.2f})")
        if seen:
            lines.append(f"| {LABELS[system]} | " + " | ".join(cells) + " |")
    return lines


def ratio_table(res: dict[str, Any]) -> list[str]:
    """Each system beside the limits measured at the same concurrency."""
    conc = sorted({int(k.split("@")[1]) for k in res["rows"]})
    lines = [
        "| system | "
        + " | ".join(f"{n}: rate ÷ disk, rate ÷ echo, p50 ÷ (echo + disk)" for n in conc)
        + " |",
        "|---|" + "---|" * len(conc),
    ]
    for system in ORDER:
        if system in ("raw", "echo"):
            continue
        cells = []
        seen = False
        for n in conc:
            r, raw, echo = row(res, system, n), row(res, "raw", n), row(res, "echo", n)
            if r is None or raw is None or echo is None:
                cells.append("–")
                continue
            seen = True
            floor = raw["p50_ms"] + echo["p50_ms"]
            cells.append(
                f"{r['rate'] / raw['rate']:.2f}, {r['rate'] / echo['rate']:.2f}, "
                f"{r['p50_ms'] / floor:.2f}"
            )
        if seen:
            lines.append(f"| {LABELS[system]} | " + " | ".join(cells) + " |")
    return lines


def plots(res: dict[str, Any], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        res.setdefault("skipped", []).append(
            "plots: `matplotlib` is not installed (`.venv/bin/pip install -r "
            "bench/requirements.txt`)"
        )
        return []
    made: list[str] = []
    conc = sorted({int(k.split("@")[1]) for k in res["rows"]})
    cdf_at = [n for n in (1, 16) if n in conc]
    if not cdf_at:
        return made
    fig, axes = plt.subplots(1, len(cdf_at), figsize=(7 * len(cdf_at), 5), squeeze=False)
    for ax, n in zip(axes[0], cdf_at, strict=True):
        for system in ORDER:
            r = row(res, system, n)
            if r is None or not r.get("cdf"):
                continue
            ys = [i / (len(r["cdf"]) - 1) for i in range(len(r["cdf"]))]
            color, ls = STYLE[system]
            ax.plot(r["cdf"], ys, label=LABELS[system], linewidth=1.5, color=color, linestyle=ls)
        ax.set_xscale("log")
        ax.set_xlabel("latency per call (ms, log)")
        ax.set_ylabel("fraction of calls")
        ax.set_title(f"Latency CDF, {n} concurrent writer(s), 1 KB records")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    name = "benchmarks-latency-cdf.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    made.append(name)

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for system in ORDER:
        pts = [(n, row(res, system, n)) for n in conc]
        pts2 = [(n, r["rate"]) for n, r in pts if r is not None and r["rate"] > 0]
        if pts2:
            color, ls = STYLE[system]
            ax.plot(
                [p[0] for p in pts2],
                [p[1] for p in pts2],
                marker="o",
                label=LABELS[system],
                color=color,
                linestyle=ls,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(conc)
    ax.set_xticklabels([str(n) for n in conc])
    ax.set_xlabel("concurrent writers (runs / agents / threads)")
    ax.set_ylabel("durable records per second (log)")
    ax.set_title("Throughput vs concurrency, 1 KB records, durable before ack")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    name = "benchmarks-throughput.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    made.append(name)
    return made


def markdown(res: dict[str, Any], images: list[str]) -> str:
    f = res["facts"]
    cfg = res["config"]
    L: list[str] = []
    L += [
        "# journald benchmarks",
        "",
        "One run of `bench/run_all.py`: every workload below ran side by side, in one process "
        "tree, on the same disk, with ~1 KB records that are durable before acknowledgement in "
        "every system. Numbers are from **this one run on this machine** and move between runs; "
        "read the ratios (all measured in the same run) rather than the absolute figures.",
        "",
        "Reproduce (writes this file and the PNGs beside it):",
        "",
        "```",
        res["command"],
        "```",
        "",
        "## Conditions",
        "",
        f"- run started {res['started']} UTC, took {res['duration_s']:.0f} s "
        f"({'quick smoke' if cfg['quick'] else 'full'} mode, {cfg['seconds']} s per "
        "throughput workload)",
        f"- load average (1/5/15 min) before: {res['load_before']}; after: {res['load_after']}",
        "- busiest processes (ps %CPU, lifetime average) before: "
        + (", ".join(res.get("busy_before") or []) or "none over 5%")
        + "; after: "
        + (", ".join(res.get("busy_after") or []) or "none over 5%"),
        f"- {f['nproc']} CPUs ({f['cpu']}), shared: the benchmark's own clients, daemon, "
        "nats-server and the raw-disk loops compete for the same cores, and other processes "
        "(colleagues' test suites, editors) may have been running on this machine",
        f"- memory {f['memory_gib']} GiB; disk: {f['disk']}; work dir {f['bench_dir']}",
        f"- kernel {f['kernel']} ({f['os']}); Python {f['python']}; grpcio {f['grpcio']}; "
        f"protobuf {f['protobuf']}; uvloop {f['uvloop']}; nats-py {f['nats-py']}; "
        f"{f['nats-server']}; SQLite {f['sqlite']}; langgraph-checkpoint-sqlite "
        f"{f['langgraph-checkpoint-sqlite']}; openai-agents {f['openai-agents']}",
        "- latency is per call (a 16-record batch is one call); throughput is durable records "
        "per second over the measured window; p50/p99 are nearest-rank over every call",
    ]
    if res.get("skipped"):
        L += ["", "**Skipped in this run:**", ""]
        L += [f"- {s}" for s in res["skipped"]]
    if res.get("errors"):
        L += ["", "**Failed in this run:**", ""]
        L += [f"- {e}" for e in res["errors"]]
    L += ["", "## Goals (ratios from this run)", ""]
    L += ["| goal | measured | limit | measured / limit | met |", "|---|---:|---:|---:|---|"]
    for g in res["goals"]:
        if g["met"] is None:
            L.append(f"| {g['goal']} | n/a | n/a | n/a | not measured {g['note']} |")
            continue
        verdict = "**met**" if g["met"] else "**missed**"
        if not g["met"]:
            if g["le"]:
                verdict += f" by {g['ratio']:.2f}×"
            else:
                verdict += f" (reaches {g['ratio']:.2f}× of the limit)"
        if g["note"]:
            verdict += f" ({g['note']})"
        L.append(
            f"| {g['goal']} | {_f(g['measured'])} | {_f(g['limit'])} | {g['ratio']:.2f} | "
            f"{verdict} |"
        )
    L += ["", "## Throughput and latency", ""]
    L += [
        "Each cell: durable records/s, then per-call p50 / p99 latency in ms. Concurrency is "
        "runs (journald: each run its own lease, spread over "
        f"{cfg['procs']} client processes at most), agents (SQLite family: one process and one "
        "connection per agent, one shared database file), threads (raw fdatasync: one file "
        "each) or calls in flight (echo, nats-py).",
        "",
    ]
    L += throughput_table(res)
    L += [
        "",
        "Ratios to the limits at the same concurrency: records/s over the raw N-file "
        "fdatasync rate (disk) and over the echo's calls/s (framework), and p50 over the sum "
        "of their p50s (1.00 = at the physical floor; a 16-record batch call is compared "
        "with one fdatasync and one echo).",
        "",
    ]
    L += ratio_table(res)
    for img in images:
        L += ["", f"![{img}]({img})"]
    limits = res.get("limit_notes", [])
    if limits:
        L += ["", "### How the limits were measured", ""]
        L += [f"- {x}" for x in limits]
    rs = res.get("resume", {})
    if rs.get("open"):
        L += ["", "## Resume: Open of an existing run", ""]
        L += [
            "Time to the first Open response (lease granted, run folded), median of "
            f"{cfg['reps']} opens (the first folds the run in full; its lease end saves the "
            "fold snapshot the later ones start from); bytes the daemon read during the Open "
            "(`rchar` of its /proc/PID/io, so page-cache hits count); beside a tight loop in "
            "the benchmark process that reads the run's files and `json.loads` every line. "
            "Windowed: the same Open asking for the last 1000 messages.",
            "",
            "| records | run size on disk | Open (ms) | first Open (ms) | windowed Open (ms) | "
            "bytes read by the daemon | first Open response | read+parse loop (ms) | "
            "Open / loop |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        windowed = {o["records"]: o for o in rs.get("open_window", [])}
        for o in rs["open"]:
            L.append(
                f"| {o['records']:,} | {o['run_bytes'] / 2**20:,.1f} MiB | {o['open_ms']:,.1f} | "
                f"{o['open_all_ms'][0]:,.1f} | "
                f"{windowed[o['records']]['open_ms'] if o['records'] in windowed else 0:,.1f} | "
                f"{o['bytes_read'] / 2**20:,.1f} MiB | "
                f"{o.get('response_bytes', 0) / 2**20:,.1f} MiB | {o['parse_ms']:,.1f} | "
                f"{o['open_ms'] / o['parse_ms']:.2f} |"
            )
    probe = rs.get("default_limits_open")
    if probe:
        if probe["result"] == "ok":
            L += ["", f"A daemon with default limits also opened `{probe['run']}`."]
        else:
            L += [
                "",
                f"**A daemon started with default limits cannot resume `{probe['run']}`**: its "
                f"Open answered `{probe['result']}`. The table above was measured on a daemon "
                "started with `--max-message-bytes 1GiB`.",
            ]
    if rs.get("history"):
        L += ["", "## History: tail page", ""]
        L += [
            f"`History(run, offset=total-{rs.get('page', 50)}, limit={rs.get('page', 50)})` on "
            "a run the daemon holds no lease on, after the run's first fold. These runs were "
            "written with the file backend's writer, outside the daemon, so they have no fold "
            "snapshot: a freshly started daemon's first read folds each in full, and since "
            "reads never write, every restarted daemon would do so again until a writer opens "
            "the run. The run's first writer (one windowed Open and its release) indexes it: "
            "its lease end saves the fold snapshot and marks that a run written through the "
            "daemon has from its first lease. Both calls are shown apart. The tail page is "
            "then measured on a restarted daemon (nothing of the run in its memory; the OS "
            "page cache warm), first call, then the median of the repeats.",
            "",
            "| messages | first read ever: a full fold (ms) | first writer's Open + release "
            "(ms) | tail page, restarted daemon (ms) | repeats (ms, median) | page messages |",
            "|---:|---:|---:|---:|---:|---:|",
        ]

        def ms(v: Any) -> str:
            return "–" if v is None else f"{v:,.1f}"

        for h in rs["history"]:
            L.append(
                f"| {h['messages']:,} | {ms(h.get('first_ms'))} | {ms(h.get('index_ms'))} | "
                f"{h['page_ms']:,.1f} | {ms(h.get('warm_ms'))} | {h['page_messages']} |"
            )
    for note in rs.get("notes", []):
        L += ["", note]
    mem = res.get("memory")
    if mem and "held" in mem:
        n = f"{mem['leases']:,}"
        L += ["", "## Memory", ""]
        L += [
            f"`bench/many_leases.py`: {n} leases (each a new run) opened by "
            f"{mem['holders']} client processes in {mem['open_s']:.1f} s"
            + (
                f" (capped from {mem['capped_from']:,}: the daemon's open-files limit here "
                f"is {mem['nofile_soft']:,} and each lease holds two)"
                if "capped_from" in mem
                else ""
            )
            + "; a 16-run unary Append benchmark alone, beside them, and alone again.",
            "",
            "| daemon state | RSS (MB) | threads | open fds |",
            "|---|---:|---:|---:|",
        ]
        for label, key in (
            ("idle (started, health checked)", "idle"),
            (f"{n} open leases", "held"),
            (f"{n} open leases, after the 16-run benchmark", "held_after_bench"),
            (f"after the {n} leases ended", "after"),
        ):
            f = mem[key]
            L.append(f"| {label} | {f['rss_mb']:.1f} | {f['threads']:.0f} | {f['fds']:.0f} |")
        L += ["", "| 16-run unary Append | rec/s | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
        for label, key in (
            ("alone, before the leases", "alone_before"),
            (f"beside {n} open leases", "beside"),
            ("alone, after the leases ended", "alone_after"),
        ):
            r = mem[key]
            L.append(f"| {label} | {r['rate']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
        L += memory_modes(mem, res.get("memory_multiplexed"))
    prof = res.get("profile")
    if prof and prof.get("categories"):
        L += ["", "## Profile of the append path", ""]
        L += [prof.get("intro", "")]
        L += ["", "| event-loop thread, by category | share of samples |", "|---|---:|"]
        L += [f"| {k} | {v * 100:.1f}% |" for k, v in prof["categories"]]
        L += ["", "| event-loop thread, top leaf functions | share |", "|---|---:|"]
        L += [f"| `{k}` | {v * 100:.1f}% |" for k, v in prof["leaves"]]
        nat = prof.get("native")
        if nat and nat.get("categories"):
            L += [
                "",
                nat["intro"],
                "",
                "| event-loop thread, by innermost frame | share |",
                "|---|---:|",
            ]
            L += [f"| {k} | {v * 100:.1f}% |" for k, v in nat["categories"]]
        if prof.get("stages"):
            L += [
                "",
                "Per-record CPU cost of each step of `JournalService._append`, timed in-process "
                "on the same code with the benchmark's ~1 KB records (no RPC, no disk):",
                "",
                "| step | µs per record |",
                "|---|---:|",
            ]
            L += [f"| {k} | {v:,.1f} |" for k, v in prof["stages"]]
        if prof.get("writer"):
            L += ["", "| writer threads, top leaf functions | share |", "|---|---:|"]
            L += [f"| `{k}` | {v * 100:.1f}% |" for k, v in prof["writer"]]
    wi = res.get("whatif") or []
    if wi:
        L += [
            "",
            "## What the compiled validator bought (measured in this run)",
            "",
            "The same daemon started through `bench/whatif_daemon.py`, which swaps the "
            "validator: **jsonschema** evaluates every record with `jsonschema`, as journald "
            "did before `journald/core/schema_predicate.py`; **off** skips schema validation (the "
            "bound for any faster validator). **shipped** is the daemon as built (the compiled "
            "predicate; jsonschema only names the field of a refused record). Same workloads, "
            "same run.",
            "",
            "| form | runs | shipped (rec/s, p50 ms) | jsonschema (rec/s, p50 ms) | "
            "off (rec/s, p50 ms) |",
            "|---|---:|---|---|---|",
        ]
        for form in ("unary", "batch"):
            by = {w["mode"]: w for w in wi if w["form"] == form}
            if not by:
                continue
            n = next(iter(by.values()))["runs"]
            cur = row(res, form, n)
            cells = [
                "n/a" if cur is None else f"{cur['rate']:,.0f}, {cur['p50_ms']:.2f}",
                *(
                    f"{by[m]['rate']:,.0f}, {by[m]['p50_ms']:.2f}" if m in by else "n/a"
                    for m in ("jsonschema", "off")
                ),
            ]
            L.append(f"| {form} | {n} | " + " | ".join(cells) + " |")
    L += anatomy_table(res.get("anatomy") or {})
    try:
        L += ["", *analysis(res)]
    except Exception as exc:  # never lose the tables for the prose
        L += ["", f"(analysis failed: {type(exc).__name__}: {exc})"]
    L.append("")
    return "\n".join(L)


def memory_modes(per_run: dict[str, Any], mux: dict[str, Any] | None) -> list[str]:
    """The same leases as an Open stream each and over one Leases stream per connection."""
    if not mux or "held" not in mux:
        return []
    a, b = per_run["held_after_bench"], mux["held_after_bench"]
    n = f"{per_run['leases']:,}"
    return [
        "",
        f"The same {n} leases held two ways, one after the other in this run (each on a new "
        "daemon): an `Open` stream per lease, then one `Leases` stream per holder connection "
        "(16 per holder process; docs/protocol.md#many-leases-on-one-stream).",
        "",
        f"| {n} leases held | RSS (MB) | threads | open fds | opened in (s) | alone / beside |",
        "|---|---:|---:|---:|---:|---:|",
        f"| an `Open` stream each | {a['rss_mb']:.1f} | {a['threads']:.0f} | {a['fds']:.0f} | "
        f"{per_run['open_s']:.1f} | {per_run['ratio']:.2f} |",
        f"| one `Leases` stream per connection | {b['rss_mb']:.1f} | {b['threads']:.0f} | "
        f"{b['fds']:.0f} | {mux['open_s']:.1f} | {mux['ratio']:.2f} |",
    ]


def anatomy_table(an: dict[str, Any]) -> list[str]:
    rows = an.get("rows") or {}
    if not rows:
        return []
    L = [
        "",
        "## Anatomy of one Append (one run, sequential calls)",
        "",
        f"`bench/latency_anatomy.py`: p50 of {an['calls']:,} sequential calls with one ~1 KB "
        "record on one run, against the daemon with parts of the append path swapped out "
        "(`bench/whatif_daemon.py`): **noop** answers at once (gRPC, journald's messages, the "
        "client), **nostore** adds the servicer's own work (decode, validate, admit, fold, "
        "ack), **shipped** adds the store. Each row's increase over the one above is what "
        "that part costs.",
        "",
        "| daemon | unary p50 ms | + over the row above | AppendStream p50 ms "
        "| + over the row above |",
        "|---|---:|---:|---:|---:|",
    ]
    prev: dict[str, float] | None = None
    for name in ("noop", "nostore", "shipped"):
        r = rows.get(name)
        if r is None:
            continue
        du = "" if prev is None else f"{r['unary_p50_ms'] - prev['unary_p50_ms']:+.2f}"
        ds = "" if prev is None else f"{r['stream_p50_ms'] - prev['stream_p50_ms']:+.2f}"
        L.append(f"| {name} | {r['unary_p50_ms']:.2f} | {du} | {r['stream_p50_ms']:.2f} | {ds} |")
        prev = r
    legs = an.get("writer_legs") or {}
    if legs:
        L += [
            "",
            f"Inside the shipped daemon, per durable write (medians of {legs['writes']:,}): "
            f"{legs['to_writer_ms']:.3f} ms from the event loop to a writer thread of the pool, "
            f"{legs['write_fdatasync_ms']:.3f} ms in `pwrite` + `fdatasync`, "
            f"{legs['back_ms']:.3f} ms back to the event loop. A raw `write + fdatasync` loop "
            f"on the same disk took {an['raw_fdatasync_p50_ms']:.3f} ms back to back and "
            f"{an.get('raw_fdatasync_paced_p50_ms', float('nan')):.3f} ms with 2 ms of idle "
            "between writes (about the pace of one sequential client).",
        ]
    return L


def write(res: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    res["goals"] = goals(res)
    try:
        images = plots(res, out)
    except Exception as exc:  # the tables matter more than the pictures
        images = []
        res.setdefault("errors", []).append(f"plots: {type(exc).__name__}: {exc}")
    path = out / "benchmarks.md"
    text = markdown(res, images)
    before = path.read_text() if path.exists() else ""
    for heading in kept_headings(before, text):
        kept = kept_section(before, heading)
        if kept:  # measured by its own script, not by this run; a full run keeps it
            text = text.rstrip("\n") + "\n\n" + kept
    path.write_text(text)
    return path


ADAPTERS_SECTION = "## Framework adapters (bench/bench_adapters.py)"
SCRUB_SECTION = "## Background scrubber"  # bench/scrub.py
CPU_SECTION = "## Daemon CPU per record"  # bench/cpu_per_record.py
KEPT_SECTIONS = (ADAPTERS_SECTION, SCRUB_SECTION, CPU_SECTION)


def kept_headings(before: str, generated: str) -> list[str]:
    """The ``## `` headings of the report before that this run did not write, in their order:
    sections measured by their own scripts (``KEPT_SECTIONS`` among them), which a full run
    must not drop."""
    ours = {line for line in generated.splitlines() if line.startswith("## ")}
    out: list[str] = []
    for line in before.splitlines():
        if line.startswith("## ") and line not in ours and line not in out:
            out.append(line)
    return out


def kept_section(text: str, heading: str) -> str:
    """The section of ``text`` under ``heading`` (up to the next ``## ``), or ''."""
    start = text.find(heading + "\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + len(heading))
    return text[start : end + 1 if end >= 0 else len(text)].rstrip("\n") + "\n"


def _g(res: dict[str, Any], system: str, n: int, key: str) -> float | None:
    r = row(res, system, n)
    return None if r is None else float(r[key])


def analysis(res: dict[str, Any]) -> list[str]:
    """Why the goals are met or missed, from this run's own numbers (profile included)."""
    out: list[str] = ["## Why: what the numbers say"]
    prof = res.get("profile") or {}
    stages = dict(prof.get("stages") or [])
    conc = res["config"]["concurrency"]
    top = max(conc)
    if stages:
        total = sum(stages.values())
        val = next((v for k, v in stages.items() if k.startswith("validate_record")), 0.0)
        batch = _g(res, "batch", top, "rate")
        text = (
            f"**Where the daemon's CPU goes.** "
            f"Per record, the servicer's own steps cost {total:,.0f} µs of CPU in this run, "
            f"of which schema validation (`validate_record`, the compiled predicate) "
            f"is {val:,.0f} µs ({val / total * 100:.0f}%). These steps alone would let one "
            f"event loop apply ~{1e6 / total:,.0f} records/s; gRPC, the socket and the "
            "hand-off to the writer threads come on top (the profile tables above)"
        )
        if batch is not None:
            text += f"; the 16-record batch form reached {batch:,.0f} records/s at {top} runs"
        text += "."
        if prof.get("loop_busy") is not None and prof.get("daemon_cpu") is not None:
            text += (
                f" Under unary load from {prof.get('runs', 16)} runs the daemon's event-loop "
                "thread used "
                f"{prof['loop_busy'] * 100:.0f}% of a core and the whole daemon "
                f"{prof['daemon_cpu'] * 100:.0f}%; the rest of the two cores went to the "
                "Python client processes (gRPC's client side costs about what its server "
                "side does) and whatever else ran, so the unary figures are bounded by the "
                "machine's CPU as a whole, and the batch figures by the daemon's."
            )
        nat = dict((prof.get("native") or {}).get("categories") or [])
        if nat:
            grpc_share = sum(v for k, v in nat.items() if k.startswith(("gRPC", "native")))
            sys_share = sum(
                v for k, v in nat.items() if k.startswith(("syscalls", "thread hand-offs"))
            )
            text += (
                f" With C frames included, the event loop's samples split into schema "
                f"validation {nat.get('validation (schema)', 0) * 100:.0f}%, the gRPC "
                f"framework (cygrpc, core, uvloop) {grpc_share * 100:.0f}%, and syscalls and "
                f"thread hand-offs (socket sends, epoll, futex/semaphore wake-ups of the "
                f"writer threads) {sys_share * 100:.0f}%. gRPC and the socket set the floor "
                "(the echo servicer pays them too)."
            )
        out.append(text)
        wi = {(w["mode"], w["form"]): w for w in res.get("whatif") or []}
        parts = []
        for form in ("unary", "batch"):
            j, o = wi.get(("jsonschema", form)), wi.get(("off", form))
            cur = row(res, form, j["runs"]) if j else None
            if j and o and cur:
                parts.append(
                    f"{form} at {j['runs']} runs: {j['rate']:,.0f} records/s with jsonschema "
                    f"on every record, {cur['rate']:,.0f} as shipped "
                    f"({cur['rate'] / j['rate']:.1f}×), {o['rate']:,.0f} with no validation "
                    f"(so validation now costs {max(0.0, 1 - cur['rate'] / o['rate']) * 100:.0f}% "
                    "of the rate)"
                )
        if parts:
            out.append(
                "**What the compiled validator bought, end to end in this run** (see the "
                "what-if table): " + "; ".join(parts) + "."
            )
    e1, raw1, u1 = _g(res, "echo", 1, "p50_ms"), _g(res, "raw", 1, "p50_ms"), None
    u1 = _g(res, "unary", 1, "p50_ms")
    an = res.get("anatomy") or {}
    rows = an.get("rows") or {}
    legs = an.get("writer_legs") or {}
    if e1 is not None and raw1 is not None and u1 is not None:
        text = (
            f"**Single-run latency.** unary Append p50 {u1:.2f} ms against a floor of "
            f"{e1 + raw1:.2f} ms (echo {e1:.2f} + fdatasync {raw1:.2f})."
        )
        if {"noop", "nostore", "shipped"} <= rows.keys() and legs:
            noop, nostore, shipped = rows["noop"], rows["nostore"], rows["shipped"]
            store_u = shipped["unary_p50_ms"] - nostore["unary_p50_ms"]
            store_s = shipped["stream_p50_ms"] - nostore["stream_p50_ms"]
            in_thread = legs["to_writer_ms"] + legs["write_fdatasync_ms"] + legs["back_ms"]
            text += (
                f" The anatomy above splits it: gRPC with journald's messages and the "
                f"client {noop['unary_p50_ms']:.2f} ms (the echo's own figure, plus building "
                f"a record and its protobuf), the servicer's work "
                f"{nostore['unary_p50_ms'] - noop['unary_p50_ms']:+.2f} ms, the store "
                f"{store_u:+.2f} ms. Of the store's part, the write itself took "
                f"{legs['write_fdatasync_ms']:.2f} ms inside the daemon (the same syscalls "
                f"took {an['raw_fdatasync_p50_ms']:.2f} ms in a tight loop, but "
                f"{an.get('raw_fdatasync_paced_p50_ms', float('nan')):.2f} ms when paced 2 ms "
                "apart like a sequential client: an idle disk queue and vCPU make each flush "
                "slower, so the tight-loop floor is out of reach for any RPC-paced writer) "
                "and the two thread hand-offs "
                f"{legs['to_writer_ms'] + legs['back_ms']:.2f} ms; the rest, "
                f"{store_u - in_thread:.2f} ms in unary against {store_s - in_thread:.2f} ms "
                "with AppendStream on the same store, is most likely what gRPC's asyncio "
                "server charges a unary handler that has to wait (here, for the disk) before "
                "it answers (a handler that waits on a thread without touching the disk showed "
                "the same gap in our experiments). "
                "AppendStream avoids most of it and the per-call setup."
            )
        else:
            text += (
                " The rest is the servicer's CPU (decode, canonical JSON, validation, fold) "
                "and the hand-off of each write to a writer thread of the pool and back."
            )
        out.append(text)
    s16, u16 = _g(res, "sqlite", 16, "rate"), _g(res, "unary", 16, "rate")
    ec16 = _g(res, "echo", 16, "rate")
    if s16 is not None and u16 is not None:
        text = (
            f"**Against SQLite at 16 agent processes** ({s16:,.0f} rec/s for SQLite FULL, "
            f"{u16:,.0f} for unary Append): each SQLite agent encodes and commits in its own "
            "process, with no RPC, so only the WAL write lock and the fsync are shared; every "
            "journald record crosses a gRPC call into one daemon process, and on two cores "
            "the 16 Python gRPC clients and the daemon's gRPC server take most of the CPU"
        )
        if ec16 is not None:
            text += (
                f" (the no-op echo itself, with no storage at all, managed {ec16:,.0f} "
                f"calls/s at 16 in flight, so unary Append reached {u16 / ec16:.2f}× of what "
                "the framework allows on this machine)"
            )
        out.append(
            text + ". Batching is journald's answer: one call, one fdatasync for 16 records."
        )
    rs = res.get("resume") or {}
    bd = dict(rs.get("open_breakdown") or {})
    if bd:
        n = int(bd.pop("records"))
        breakdown = ", ".join(f"{k} {v:,.0f} ms" for k, v in bd.items())
        opens = {o["records"]: o for o in rs.get("open", [])}
        o = opens.get(n)
        extra = ""
        if o:
            extra = (
                f" The daemon read {o['bytes_read'] / o['run_bytes']:.1f}× the run's size "
                f"and sent a {o.get('response_bytes', 0) / 2**20:.1f} MiB first response."
            )
        out.append(
            f"**Open folds only the tail, but is still O(run length).** For the {n:,}-record "
            f"run, timed in-process on the same code: {breakdown}.{extra} An Open continues "
            "from the run's fold snapshot (docs/design.md#fold-snapshots) and folds only the "
            "records after it; loading the snapshot parses the whole conversation, which is "
            "what still grows with the run, windowed or not: a flat windowed Open needs a "
            "lease state that does not hold every message (older ones paged from the store)."
        )
    hist = rs.get("history") or []
    if len(hist) >= 2:
        small = min(hist, key=lambda h: h["messages"])
        big = max(hist, key=lambda h: h["messages"])
        head = (
            f"**History tail page at {big['messages']:,} messages: "
            f"{big['page_ms'] / small['page_ms']:.2f}× the {small['messages']:,}-message "
            f"figure** ({small['page_ms']:,.0f} ms and {big['page_ms']:,.0f} ms on a "
            "restarted daemon"
        )
        if big.get("first_ms") is not None:
            head += (
                f"; a first read of the run written outside the daemon, a full fold, took "
                f"{big['first_ms']:,.0f} ms at {big['messages']:,}"
            )
        text = head + "). " + HISTORY_WHY
        mid = [h for h in hist if small["messages"] < h["messages"] < big["messages"]]
        if mid:
            m = min(mid, key=lambda h: h["messages"])
            text += (
                f" From {m['messages']:,} to {big['messages']:,} messages the page went from "
                f"{m['page_ms']:,.0f} to {big['page_ms']:,.0f} ms "
                f"({big['page_ms'] / m['page_ms']:.2f}×): past the first segment the cost "
                "no longer follows the run's length: a read from the mark's seq starts at that "
                "record's line in its segment (checked against the line before it), so the "
                "page reads and folds about the same records at every length."
            )
        out.append(text)
    js1, n1 = _g(res, "js-unary", 1, "p50_ms"), _g(res, "nats", 1, "p50_ms")
    if js1 is not None and n1 is not None and e1 is not None:
        out.append(
            f"**JetStream.** Append p50 {js1:.2f} ms against {n1:.2f} ms for a direct "
            f"publish plus {e1:.2f} ms of gRPC. Both wait for the same nats-server flush "
            "(`sync_interval: always`); the daemon adds the same per-record CPU as with the "
            "file backend and journald's fenced publish "
            "([design](design.md#jetstream-backend): the expected last "
            "sequence of the run's wildcard subject, checked by the server, plus a message "
            "id), which `bench/bench_jetstream.py` measures on its own: 0.2-0.4 ms over a "
            "plain publish on this machine, the price of refusing a stale writer on another "
            "host. The cross-host lease costs no round trip per append: the daemon watches "
            "the lease bucket instead of reading the run's entry back before each write "
            "([design](design.md#leases-across-hosts)). The rest of the gap is the daemon's "
            "per-call work, the same as on the file backend (the unary rows above)."
        )
    mem = res.get("memory") or {}
    if "held" in mem:
        per = (mem["held"]["rss_mb"] - mem["idle"]["rss_mb"]) / max(1, mem["leases"]) * 1024
        out.append(
            f"**Memory.** {mem['leases']:,} open leases cost ~{per:,.0f} KiB each "
            f"({mem['held_after_bench']['threads']:.0f} threads: the file store's writes share "
            "one fixed pool of threads however many journals are open, and two descriptors "
            f"each); 16 runs appended x{mem['ratio']:.2f} as fast alone as beside them."
        )
        mux = res.get("memory_multiplexed") or {}
        if "held" in mux:
            per_mux = (mux["held"]["rss_mb"] - mux["idle"]["rss_mb"]) / max(1, mux["leases"])
            out[-1] += (
                f" Held over one `Leases` stream per client connection instead of an `Open` "
                f"stream each, they cost ~{per_mux * 1024:,.0f} KiB each (the gRPC call, its "
                f"handler task and wrappers are per stream, not per lease); x{mux['ratio']:.2f}."
            )
    return ["\n\n".join(out)]
