"""Issue 27's unary latency goal in one run: the daemon's unary Append p50 on the file backend
against the no-op gRPC echo's p50 plus a raw ``write + fdatasync`` p50 (one file, one thread),
one caller each, with this tree's daemon and (``--before TREE``) an older tree's daemon,
rounds interleaved so the machine's load falls on both alike.

    git archive <commit> journald | tar -x -C /tmp/p50-before
    .venv/bin/python bench/unary_p50_goal.py --before /tmp/p50-before     # ~1 minute

The workloads are ``bench/run_all.py``'s (its ``agent_procs.py`` driver, ~1 KB records, one
run, sequential calls); the figure printed per round and as the median over rounds is
``unary p50 / (echo p50 + fdatasync p50)``, the goal being at most 1.25.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_all
from common import ROOT, medians, print_medians, print_round

sys.path.insert(0, str(ROOT))
from tests.daemon import Daemon


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="an older tree (its journald/)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per workload")
    ap.add_argument("--json", type=Path, default=None, help="also write the ratios here")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME:ARG,ARG",
        help="also this tree's daemon started with these arguments (e.g. aio-off:--aio-sync,off)",
    )
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="journald-p50goal-"))
    cfg = run_all.Config.make(False, args.seconds, set())
    ctx = run_all.Ctx(cfg, work)
    trees: dict[str, Path] = {"after": ROOT}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    extra: dict[str, list[str]] = {}
    for spec in args.also:
        name, _, argv_text = spec.partition(":")
        trees[name], extra[name] = ROOT, [a for a in argv_text.split(",") if a]
    ratios: dict[str, list[float]] = {t: [] for t in trees}
    with run_all.echo_server(work) as echo:
        for r in range(args.rounds):
            p50: dict[str, float] = {}
            p50["echo"] = run_all.run_agents(ctx, "echo", 1, echo, tag=f"e{r}")["p50_ms"]
            raw = work / f"raw-{r}"
            raw.mkdir()
            p50["disk"] = run_all.raw_fdatasync(raw, 1, args.seconds)["p50_ms"]
            floor = p50["echo"] + p50["disk"]
            for t, tree in trees.items():
                base = work / f"{t}-{r}"
                base.mkdir()
                with Daemon(base, "file", *extra.get(t, []), cwd=tree) as d:
                    p50[t] = run_all.run_agents(ctx, "unary", 1, d.target, tag=f"{t}{r}")["p50_ms"]
                ratios[t].append(p50[t] / floor)
            print_round(
                r,
                f"echo p50 {p50['echo']:.2f} ms, write+fdatasync p50 {p50['disk']:.2f} ms",
                p50,
                ratios,
            )
    print_medians(ratios)
    if args.json is not None:
        args.json.write_text(json.dumps(medians(ratios), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
