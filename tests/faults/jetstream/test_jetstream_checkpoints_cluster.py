"""Checkpoints on a three-node cluster (R3 stream and buckets), one cluster for the module.

* A checkpoint write held by the failpoint ``js_object_before_meta`` (every chunk acknowledged
  by a quorum, its meta not yet published) while the bucket's leader node is killed -9 by its
  pid, then let go: the checkpoint is either wholly there (listed, restorable, exportable from
  another daemon on the surviving nodes) or cleanly refused and a retry stores it.
* A bucket with fewer replicas than the stream is refused at start-up with the
  ``nats object edit`` line that fixes it, and the daemon starts once natscli ran it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import journald_client as jc
import nats
import pytest
from nats.js.api import ObjectStoreConfig, StorageType

from journald.core.checkpoints import verify_export
from journald.core.schema import validate_payload
from journald.storage.jetstream.buckets import CHECKPOINTS, ROLES, bucket_name
from journald.storage.jetstream.objects import stream_of
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.server.test_serve_refusals import serve
from tests.nats_server import NatsCluster, create_stream
from tests.natscli import printed_commands, run_all
from tests.waiting import eventually, eventually_async, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def replicated_stream(cluster: NatsCluster, name: str) -> None:
    """Once the cluster has elected its meta leader, the stream and its buckets (R3)."""
    urls = [n.url for n in cluster.nodes if n.proc is not None and n.proc.poll() is None]
    asyncio.run(
        eventually_async(
            lambda: create_stream(urls, name, name.lower(), num_replicas=3),
            what="the cluster to accept a stream",
            timeout_s=90,
            retry_on=(Exception,),
        )
    )


async def led_by_survivors(urls: list[str], stream: str) -> bool:
    """Whether the stream and both its buckets answer with a leader among ``urls`` (after a
    node is killed the survivors elect new leaders; a daemon started before then waits for
    them at start-up, up to ``--nats-leader-wait``)."""
    nc = await nats.connect(urls)
    try:
        for name in (stream, *(stream_of(bucket_name(stream, role)) for role in ROLES)):
            info = await asyncio.wait_for(nc.jsm().stream_info(name), 2)
            if info.cluster is None or not info.cluster.leader:
                return False
        return True
    except (TimeoutError, nats.errors.Error):  # not answered yet: no leader elected
        return False
    finally:
        await nc.close()


async def bucket_leader(urls: list[str], bucket: str) -> str:
    nc = await nats.connect(urls)
    try:
        info = await nc.jsm().stream_info(stream_of(bucket))
        assert info.cluster is not None
        return str(info.cluster.leader)
    finally:
        await nc.close()


def test_a_bucket_with_fewer_replicas_than_the_stream_is_refused_with_an_edit_that_works(
    cluster: NatsCluster, tmp_path: Path, natscli: str
) -> None:
    replicated_stream(cluster, "FEW")
    bucket = bucket_name("FEW", CHECKPOINTS)

    async def shrink() -> None:
        nc = await nats.connect(cluster.urls)
        try:
            await nc.jetstream().delete_object_store(bucket)
            config = ObjectStoreConfig(storage=StorageType.FILE, replicas=1)
            await nc.jetstream().create_object_store(bucket, config)
        finally:
            await nc.close()

    asyncio.run(shrink())
    urls = ",".join(cluster.urls)
    flags = ["--backend", "jetstream", "--nats-url", urls, "--stream", "FEW"]
    code, err = serve(tmp_path, *flags)
    assert code == 2, err
    assert "Traceback" not in err, err
    assert f"journald: bucket {bucket} is not safe for journald: it has 1 replica(s)" in err
    assert "at least the stream's 3" in err
    fixes = printed_commands(err)
    assert fixes == [f"nats --server {urls} object edit {bucket} --replicas=3"]
    run_all(fixes, natscli, tmp_path / "home")
    (tmp_path / "after").mkdir()
    with Daemon(tmp_path / "after", "jetstream", *flags[2:]) as daemon:
        assert daemon.proc is not None
        assert daemon.proc.poll() is None  # serving


def test_a_checkpoint_written_while_its_bucket_leader_is_killed_is_whole_or_cleanly_refused(
    cluster: NatsCluster, tmp_path: Path
) -> None:
    replicated_stream(cluster, "HOLD")
    release = tmp_path / "release"
    urls = ",".join(cluster.urls)
    flags = ("--nats-url", urls, "--stream", "HOLD")
    (tmp_path / "a").mkdir()
    host_a = Daemon(
        tmp_path / "a",
        "jetstream",
        *flags,
        socket=Path(f"/tmp/jd-hold-a-{os.getpid()}/s"),
        env={"JOURNALD_FAILPOINTS": f"js_object_before_meta=wait:{release}"},
    )
    victim = None
    with host_a, jc.connect(str(host_a.socket)) as client:
        with client.start("held", FP, "a long question " * 2000) as run:
            run.assistant("a long answer " * 2000, stop_reason="end_turn")  # 2 chunks and more
        outcome: list[object] = []

        def take() -> None:
            try:
                outcome.append(client.checkpoint("held", label="under fire"))
            except jc.JournaldError as exc:
                outcome.append(exc)

        taking = threading.Thread(target=take)
        taking.start()
        wait_until(lambda: Path(f"{release}.reached").exists(), what="the held write")
        leader = asyncio.run(bucket_leader(cluster.urls, bucket_name("HOLD", CHECKPOINTS)))
        victim = next(n for n in cluster.nodes if n.name == leader)
        victim.kill()  # SIGKILL, by its pid, between the chunks and the meta
        release.touch()
        taking.join(120)
        assert not taking.is_alive()
        [result] = outcome
        if isinstance(result, jc.JournaldError):  # cleanly refused: nothing half there
            assert isinstance(result, jc.BackendUnavailable), result
            assert client.checkpoints("held") == []
            # the retry the refusal asks for: the killed node may also have led the leases
            # bucket, whose election can outlast the checkpoint bucket's (backend_unavailable
            # again until it ends; bounded)
            result = eventually(
                lambda: client.checkpoint("held", label="retried"),
                what="a checkpoint once the cluster has elected its leaders",
                timeout_s=60.0,
                retry_on=(jc.BackendUnavailable,),
            )
        assert isinstance(result, jc.CheckpointMeta)
        assert client.checkpoints("held") == [result]
    survivor_urls = [n.url for n in cluster.nodes if n is not victim]
    wait_until(
        lambda: asyncio.run(led_by_survivors(survivor_urls, "HOLD")),
        what="leaders elected on the surviving nodes",
        timeout_s=60,
    )
    survivors = ",".join(survivor_urls)
    (tmp_path / "b").mkdir()
    host_b = Daemon(
        tmp_path / "b",
        "jetstream",
        "--nats-url",
        survivors,
        "--stream",
        "HOLD",
        socket=Path(f"/tmp/jd-hold-b-{os.getpid()}/s"),
    )
    try:
        with host_b, jc.connect(str(host_b.socket)) as client_b:
            assert client_b.checkpoints("held") == [result]
            exported = verify_export(
                client_b.export_checkpoint("held", result.checkpoint_id), validate_payload
            )
            assert exported.meta.hash == result.hash
            assert client_b.restore("held", result.checkpoint_id).to_messages == (
                result.message_count
            )
    finally:
        assert victim is not None
        victim.restart()  # the module's cluster stays whole for the next test
