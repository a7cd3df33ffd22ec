"""Issue 27 item 5's goal in one run: the daemon's unary Append p50 on JetStream against a
direct nats-py publish p50 plus the no-op gRPC echo's p50, one caller each, with this tree's
daemon and (``--before TREE``) an older tree's daemon, rounds interleaved so the machine's
load falls on both alike.

    git archive <commit> journald | tar -x -C /tmp/js-before
    .venv/bin/python bench/js_append_goal.py --before /tmp/js-before     # ~2 minutes

The same workloads as ``bench/run_all.py`` (its ``agent_procs.py`` driver, ~1 KB records,
nats-server ``sync_interval: always``, the daemon's cross-host leases on as served); the
figure printed per round and as the median over rounds is
``js-unary p50 / (nats p50 + echo p50)``, the goal being at most 1.25.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_all
from common import ROOT

sys.path.insert(0, str(ROOT))
from tests.daemon import Daemon
from tests.nats_server import NatsServer, create_stream


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="an older tree (its journald/)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per workload")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="journald-jsgoal-"))
    cfg = run_all.Config.make(False, args.seconds, set())
    ctx = run_all.Ctx(cfg, work)
    trees: dict[str, Path] = {"after": ROOT}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    server = NatsServer(work / "nats", name="jsgoal")
    server.start()
    ratios: dict[str, list[float]] = {t: [] for t in trees}
    try:
        for t in trees:
            asyncio.run(create_stream(server.url, f"G{t.upper()}", f"g{t}"))
        with run_all.echo_server(work) as echo:
            for r in range(args.rounds):
                p50: dict[str, float] = {}
                p50["echo"] = run_all.run_agents(ctx, "echo", 1, echo, tag=f"e{r}")["p50_ms"]
                nats_row: dict[str, Any] = run_all.run_agents(
                    ctx, "nats", 1, server.url, tag=f"n{r}", stream_prefix="gafter.direct"
                )
                p50["nats"] = nats_row["p50_ms"]
                for t, tree in trees.items():
                    base = work / f"{t}-{r}"
                    base.mkdir()
                    stream = f"G{t.upper()}"
                    with Daemon(
                        base, "jetstream", "--nats-url", server.url, "--stream", stream, cwd=tree
                    ) as d:
                        row = run_all.run_agents(ctx, "unary", 1, d.target, tag=f"{t}{r}")
                    p50[t] = row["p50_ms"]
                    ratios[t].append(p50[t] / (p50["nats"] + p50["echo"]))
                print(
                    f"round {r + 1}: echo p50 {p50['echo']:.2f} ms, direct publish p50 "
                    f"{p50['nats']:.2f} ms; "
                    + "; ".join(
                        f"{t} daemon Append p50 {p50[t]:.2f} ms ({ratios[t][-1]:.2f}x)"
                        for t in trees
                    ),
                    flush=True,
                )
    finally:
        server.stop()
    for t, xs in ratios.items():
        print(
            f"{t}: median ratio {statistics.median(xs):.2f}x over {len(xs)} rounds (goal <= 1.25)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
