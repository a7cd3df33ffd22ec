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

``--floor`` adds two daemons of this tree to every round, each with one patch applied in its
own process before it serves (never shipped): ``publish-only``, whose Append does nothing but
one ``js.publish`` of the record (its protobuf bytes, ~1 KB) on the daemon's connection before
it answers (gRPC, the edge and the publish in one process: the floor of any daemon of this
design), and ``no-publish``, the shipped daemon whose journal acknowledges each write without
publishing (everything but the publish).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_all
from common import ROOT, medians, print_medians, print_round

sys.path.insert(0, str(ROOT))
from tests.daemon import Daemon
from tests.nats_server import NatsServer, create_stream

FLOORS = ("publish-only", "no-publish")


def _publish_only() -> None:
    """Append answered after one publish of the first record (its protobuf bytes) to a
    subject of its own (``<prefix>.floor<pid>.<n>``, unfenced), nothing else of the
    servicer's path."""
    from journald_proto import journal_pb2 as pb

    from journald.server import service
    from journald.server.runs import ack_pb
    from journald.storage.base import JETSTREAM_ACK, AppendResult

    sent: list[Any] = [0, None]  # publishes so far, the connection's JetStream context

    async def append(self: Any, request: Any, context: Any = None) -> Any:
        store = self.store
        sent[0] += 1
        sent[1] = sent[1] or store.connection.jetstream(timeout=store.ack_timeout_s)
        subject = f"{store.prefix}.floor{os.getpid()}.{sent[0]}"
        await sent[1].publish(subject, request.records[0].SerializeToString())
        acks = [ack_pb(AppendResult(r.seq, "", JETSTREAM_ACK)) for r in request.records]
        return pb.AppendResponse(acks=acks)

    service.JournalService._append = append  # type: ignore[method-assign]


def _no_publish() -> None:
    """The journal's write acknowledged at once, without a publish (the fence stays)."""
    from journald.storage.jetstream import journal

    async def write(self: Any, new: Any) -> None:
        return None

    journal.JetStreamJournal._write = write  # type: ignore[method-assign]


def serve_floor(variant: str, argv: list[str]) -> int:
    {"publish-only": _publish_only, "no-publish": _no_publish}[variant]()
    from journald.program import main as journald_main

    sys.argv = ["journald", *argv]
    return int(journald_main() or 0)


class FloorDaemon(Daemon):
    """A daemon of this tree served through ``serve_floor`` (the patch of ``variant``)."""

    def __init__(self, variant: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.variant = variant

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("serve")
        return [sys.executable, str(Path(__file__).resolve()), "--serve-floor", self.variant,
                *cmd[at:]]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 and argv[0] == "--serve-floor":
        return serve_floor(argv[1], argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="an older tree (its journald/)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per workload")
    ap.add_argument("--json", type=Path, default=None, help="also write the ratios here")
    ap.add_argument("--floor", action="store_true", help="also the publish-only/no-publish daemons")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="journald-jsgoal-"))
    cfg = run_all.Config.make(False, args.seconds, set())
    ctx = run_all.Ctx(cfg, work)
    trees: dict[str, Path] = {"after": ROOT}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    server = NatsServer(work / "nats", name="jsgoal")
    server.start()
    floors = FLOORS if args.floor else ()
    ratios: dict[str, list[float]] = {t: [] for t in (*trees, *floors)}
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
                for v in floors:
                    base = work / f"{v}-{r}"
                    base.mkdir()
                    with FloorDaemon(
                        v, base, "jetstream", "--nats-url", server.url, "--stream", "GAFTER"
                    ) as d:
                        row = run_all.run_agents(ctx, "unary", 1, d.target, tag=f"{v}{r}")
                    p50[v] = row["p50_ms"]
                    ratios[v].append(p50[v] / (p50["nats"] + p50["echo"]))
                print_round(
                    r,
                    f"echo p50 {p50['echo']:.2f} ms, direct publish p50 {p50['nats']:.2f} ms",
                    p50,
                    ratios,
                )
    finally:
        server.stop()
    print_medians(ratios)
    if args.json is not None:
        args.json.write_text(json.dumps(medians(ratios), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
