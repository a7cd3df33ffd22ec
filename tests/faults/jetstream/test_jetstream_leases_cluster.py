"""Cross-host leases on a three-node cluster (R3 stream and buckets), one cluster for the module.

* A daemon started while its stream has no leader (two of three nodes killed -9) waits for one,
  saying so in its log, and serves once the nodes are back, instead of exiting 5.
* The NATS node a lease holder's daemon is connected to is killed -9: the daemon reconnects to
  a surviving node and keeps its lease (another daemon is refused), or, when reconnecting
  and the survivors' elections outlast its renewal deadline, ends it; when the holder's
  daemon is killed -9 too, the other daemon takes the run, and no seq is ever acknowledged to
  two writers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.faults.jetstream.test_jetstream_checkpoints_cluster import (
    led_by_survivors,
    replicated_stream,
)
from tests.integration.clientbin.common import FP
from tests.nats_server import NatsCluster
from tests.waiting import eventually, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

WAITING_FOR_A_LEADER = (
    "waiting up to 120s for a leader",  # the stream's (journald.storage.jetstream.connect)
    "waiting for the bucket to have a leader",  # the leases bucket's (.leases)
)


def test_a_daemon_started_while_its_stream_has_no_leader_waits_for_one_and_then_serves(
    cluster: NatsCluster, tmp_path: Path
) -> None:
    replicated_stream(cluster, "NOLEAD")
    lost = cluster.nodes[1:]
    for node in lost:
        node.kill()  # no quorum: nothing can be elected until one comes back
    (tmp_path / "d").mkdir()
    daemon = Daemon(
        tmp_path / "d",
        "jetstream",
        *("--nats-url", cluster.nodes[0].url, "--stream", "NOLEAD"),
        *("--nats-leader-wait", "120"),
        socket=Path(f"/tmp/jd-nolead-{os.getpid()}/s"),
    )
    with open(daemon.log_path, "ab") as log:
        daemon.proc = subprocess.Popen(daemon.command(), stdout=log, stderr=log)
    try:
        # where it waits depends on when node 0 noticed the lost quorum: a stream leader that
        # has not stepped down yet answers the stream check, and the daemon waits at its
        # leases bucket instead (on a loaded machine, two suites side by side)
        wait_until(
            lambda: any(says in daemon.log() for says in WAITING_FOR_A_LEADER),
            what="the daemon to say it waits for a leader",
            timeout_s=60,
        )
        assert daemon.proc.poll() is None, daemon.log()
        for node in lost:
            node.restart()
        daemon.wait_ready()
        with jc.connect(str(daemon.socket)) as client, client.start("led", FP, "hello") as run:
            run.assistant("served once a leader was elected", stop_reason="end_turn")
    finally:
        daemon.stop()
        for node in lost:
            if node.proc is None or node.proc.poll() is not None:
                node.restart()


def test_a_lease_survives_its_nats_node_and_moves_within_its_ttl_when_its_host_dies(
    cluster: NatsCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replicated_stream(cluster, "MOVE")
    holder_node, *others = cluster.nodes
    survivors = ",".join(n.url for n in others)
    hosts = {}
    for name, urls in (("a", holder_node.url), ("b", survivors)):
        (tmp_path / name).mkdir()
        hosts[name] = Daemon(
            tmp_path / name,
            "jetstream",
            *("--nats-url", urls, "--stream", "MOVE", "--writer-name", f"host-{name}"),
            socket=Path(f"/tmp/jd-move-{name}-{os.getpid()}/s"),
        )
    acked: dict[int, str] = {}

    def ack(run: jc.Run, host: str, text: str) -> None:
        seq = run.user(text).seq
        assert seq not in acked, f"seq {seq} acknowledged to {acked[seq]} and to {host}"
        acked[seq] = host

    try:
        with hosts["a"], hosts["b"]:
            client_a = jc.connect(str(hosts["a"].socket), reconnect_timeout=0)
            run_a = client_a.start("moving", FP, "hello")
            ack(run_a, "a", "from A before its node dies")
            holder_node.kill()  # A's daemon reconnects to a node it discovered
            try:
                eventually(
                    lambda: ack(run_a, "a", "from A through another node"),
                    what="A's daemon to write through a surviving node",
                    timeout_s=60,
                    retry_on=(jc.BackendUnavailable,),
                )
                kept = True
            except jc.LeaseLost:  # reconnecting (and electing) outlasted its renewal deadline
                kept = False
            with jc.connect(str(hosts["b"].socket)) as client_b:
                run_b: jc.Run | None = None
                if kept:
                    refused: jc.Locked | None = None
                    try:
                        run_b = client_b.resume("moving", FP)
                    except jc.Locked as exc:  # A is alive and renewing
                        refused = exc
                    if refused is not None:
                        assert refused.metadata["holder_writer"] == "host-a"
                    else:
                        # A's renewal lapsed after its write (a loaded machine can delay it past
                        # the ttl while A's daemon fails over): the lease moved early, so A may
                        # not write any more
                        with pytest.raises(jc.LeaseLost):
                            ack(run_a, "a", "from A after its lease moved")
                hosts["a"].kill9()  # then the whole host dies
                killed = time.monotonic()
                client_a.close()
                if run_b is None:
                    run_b = eventually(
                        lambda: client_b.resume("moving", FP),
                        what="host B to take the run",
                        timeout_s=60,
                        retry_on=(jc.Locked, jc.BackendUnavailable),
                    )
                    moved_s = time.monotonic() - killed
                    with capsys.disabled():
                        print(
                            f"\nR3: lease moved {moved_s:.2f}s after kill -9 of its holder (ttl "
                            f"3s; A {'kept' if kept else 'lost'} its lease when its node died)"
                        )
                ack(run_b, "b", "from B")
                run_b.close()
                stored = {r.seq: r for r in client_b.load("moving")}
        assert sorted(acked) == sorted(stored)[1:]
    finally:
        holder_node.restart()
        wait_until(
            lambda: asyncio.run(led_by_survivors(cluster.urls, "MOVE")),
            what="the cluster whole again",
            timeout_s=60,
        )
