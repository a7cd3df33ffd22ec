"""The JetStream run buckets are bound like the stream: never created, refused with a fix.

Each test makes a stream whose buckets are missing or unsafe on the session's nats-server,
lets the binding refuse it, runs every printed fix with the pinned `nats` binary
(tests/natscli.py, stdin closed) and shows that the binding then succeeds and stores a
checkpoint. Also here: what only the JetStream store promises beyond the shared contract
(tests/storage/contract/test_checkpoint_contract.py), that a checkpoint id is write-once
across hosts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import DiscardPolicy, ObjectStoreConfig, StorageType, StreamConfig

from journald.core.checkpoints import Checkpoint
from journald.core.errors import StoreCorrupted
from journald.storage.jetstream.buckets import (
    ATTACHMENTS,
    CHECKPOINTS,
    BucketConfigError,
    bucket_name,
)
from journald.storage.jetstream.checkpoint_store import bind_run_stores, sweep_orphan_chunks
from journald.storage.jetstream.config import Cli
from journald.storage.jetstream.lease_bucket import bind_lease_bucket, kv_stream, lease_bucket_name
from journald.storage.jetstream.leases import JetStreamLeases
from journald.storage.jetstream.objects import stream_of
from journald.storage.jetstream.store import JetStreamStore
from tests.nats_server import NatsServer, create_stream, delete_stream
from tests.natscli import printed_commands, printed_env, run_all
from tests.storage.backend_jetstream import session_server
from tests.storage.contract.test_checkpoint_contract import checkpoint

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "nats"

pytestmark = pytest.mark.timeout(1800)  # building natscli the first time takes minutes


@pytest.fixture
def server() -> NatsServer:
    return session_server()


@pytest.fixture
async def stream(server: NatsServer, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    name = "BK" + "".join(c for c in request.node.name.upper() if c.isalnum())[-24:]
    await create_stream(server.url, name, name.lower())
    yield name
    await delete_stream(server.url, name)


async def replace_bucket(url: str, stream: str, role: str, **config: Any) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.delete_object_store(bucket_name(stream, role))
        if config:
            await js.create_object_store(bucket_name(stream, role), ObjectStoreConfig(**config))
    finally:
        await nc.close()


async def drop_lease_bucket(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().delete_key_value(lease_bucket_name(stream))
    finally:
        await nc.close()


async def lease_refusal(url: str, stream: str) -> BucketConfigError:
    store = await JetStreamStore.connect(url, stream)
    try:
        with pytest.raises(BucketConfigError) as err:
            await bind_lease_bucket(
                store.connection, stream, url, Cli(url), replicas=1, ack_timeout_s=2.0
            )
        return err.value
    finally:
        await store.close()


async def leases_work(url: str, stream: str) -> None:
    """The binding accepts the lease bucket and a daemon's leases run on it."""
    store = await JetStreamStore.connect(url, stream)
    try:
        bucket = await bind_lease_bucket(
            store.connection, stream, url, Cli(url), replicas=1, ack_timeout_s=2.0
        )
        leases = JetStreamLeases(store, bucket)
        await leases.start()
        try:
            assert await leases.acquire("leased-run", {"name": "test"}) > 0
            await leases.confirm("leased-run", "a write")
        finally:
            await leases.close()
    finally:
        await store.close()


async def refusal(url: str, stream: str) -> BucketConfigError:
    store = await JetStreamStore.connect(url, stream)
    try:
        with pytest.raises(BucketConfigError) as err:
            await bind_run_stores(store, Cli(url))
        return err.value
    finally:
        await store.close()


async def binds_and_stores(url: str, stream: str) -> None:
    store = await JetStreamStore.connect(url, stream)
    try:
        cps, blobs = await bind_run_stores(store, Cli(url))
        assert cps is not None
        assert blobs is not None
        cp = checkpoint("bound-run")
        await cps.put(cp)
        assert (await cps.get("bound-run", cp.checkpoint_id)).messages == cp.messages
        digest, _ = await blobs.put("bound-run", b"bytes")
        assert await blobs.get("bound-run", digest) == b"bytes"
    finally:
        await store.close()


async def test_missing_buckets_are_refused_with_object_add_lines_that_work(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await replace_bucket(server.url, stream, CHECKPOINTS)
    await replace_bucket(server.url, stream, ATTACHMENTS)
    err = await refusal(server.url, stream)
    assert f"{stream}_CHECKPOINTS, {stream}_ATTACHMENTS do not exist" in err.message
    assert "journald never creates them" in err.message
    fixes = printed_commands(err.message)
    assert fixes == [
        f"nats --server {server.url} object add {stream}_{role} --storage file --replicas 1 "
        "--no-compress"
        for role in (CHECKPOINTS, ATTACHMENTS)
    ]
    run_all(fixes, natscli, tmp_path / "home")
    await binds_and_stores(server.url, stream)


async def test_the_deploy_script_creates_buckets_the_binding_accepts(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await replace_bucket(server.url, stream, CHECKPOINTS)
    await replace_bucket(server.url, stream, ATTACHMENTS)
    await drop_lease_bucket(server.url, stream)
    env = printed_env(tmp_path / "home", server.url)
    env["PATH"] = f"{Path(natscli).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(  # noqa: ASYNC221 - a short CLI run; nothing else runs meanwhile
        [str(DEPLOY / "buckets.sh"), stream, "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    await binds_and_stores(server.url, stream)
    await leases_work(server.url, stream)


async def test_a_missing_lease_bucket_is_refused_with_a_kv_add_line_that_works(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await drop_lease_bucket(server.url, stream)
    err = await lease_refusal(server.url, stream)
    bucket = lease_bucket_name(stream)
    assert f"bucket {bucket} does not exist" in err.message
    assert "journald never creates it" in err.message
    fixes = printed_commands(err.message)
    assert fixes == [
        f"nats --server {server.url} kv add {bucket} --storage file --replicas 1 --history 1 "
        "--marker-ttl 1s"
    ]
    run_all(fixes, natscli, tmp_path / "home")
    await leases_work(server.url, stream)


async def test_a_lease_bucket_without_per_key_ttls_is_refused_with_an_edit_that_works(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await drop_lease_bucket(server.url, stream)
    bucket = lease_bucket_name(stream)
    nc = await nats.connect(server.url)
    try:  # a KV bucket as an older client makes it: no per-message TTLs
        await nc.jetstream().add_stream(
            StreamConfig(
                name=kv_stream(bucket),
                subjects=[f"$KV.{bucket}.>"],
                max_msgs_per_subject=1,
                allow_rollup_hdrs=True,
                deny_delete=True,
                allow_direct=True,
                storage=StorageType.FILE,
                discard=DiscardPolicy.NEW,
            )
        )
    finally:
        await nc.close()
    err = await lease_refusal(server.url, stream)
    assert "per-key TTLs are off" in err.message
    fixes = printed_commands(err.message)
    assert fixes == [f"nats --server {server.url} kv edit {bucket} --marker-ttl=1s"]
    run_all(fixes, natscli, tmp_path / "home")
    await leases_work(server.url, stream)


async def test_a_bucket_whose_objects_expire_is_refused_with_an_edit_that_works(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await replace_bucket(server.url, stream, ATTACHMENTS, storage=StorageType.FILE, ttl=3600.0)
    err = await refusal(server.url, stream)
    assert f"bucket {stream}_ATTACHMENTS is not safe for journald" in err.message
    assert "expire after 3600s" in err.message
    fixes = printed_commands(err.message)
    assert fixes == [f"nats --server {server.url} object edit {stream}_ATTACHMENTS --ttl=0s"]
    run_all(fixes, natscli, tmp_path / "home")
    await binds_and_stores(server.url, stream)


async def test_an_empty_bucket_in_memory_is_refused_with_remove_and_add_lines_that_work(
    server: NatsServer, stream: str, natscli: str, tmp_path: Path
) -> None:
    await replace_bucket(server.url, stream, CHECKPOINTS, storage=StorageType.MEMORY)
    err = await refusal(server.url, stream)
    assert "storage is memory, journald needs file" in err.message
    bucket = f"{stream}_CHECKPOINTS"
    assert printed_commands(err.message) == [
        f"nats --server {server.url} object rm {bucket} -f",
        f"nats --server {server.url} object add {bucket} --storage file --replicas 1 --no-compress",
    ]
    run_all(printed_commands(err.message), natscli, tmp_path / "home")
    await binds_and_stores(server.url, stream)


def same_id_other_content(cp: Checkpoint) -> Checkpoint:
    other = checkpoint(cp.meta.run_id, "another conversation")
    return Checkpoint(replace(other.meta, checkpoint_id=cp.checkpoint_id), other.messages)


async def test_a_checkpoint_id_is_write_once_across_hosts(server: NatsServer, stream: str) -> None:
    host_a = await JetStreamStore.connect(server.url, stream)
    host_b = await JetStreamStore.connect(server.url, stream)
    try:
        cps_a, _ = await bind_run_stores(host_a, Cli(server.url))
        cps_b, _ = await bind_run_stores(host_b, Cli(server.url))
        assert cps_a is not None
        assert cps_b is not None
        original = checkpoint("run-w", "original")
        await cps_a.put(original)
        clash = same_id_other_content(original)
        with pytest.raises(StoreCorrupted, match=r"already exists .* with other content"):
            await cps_b.put(clash)
        await cps_b.put(original)  # the same bytes again: nothing to refuse
        assert (await cps_b.get("run-w", original.checkpoint_id)).messages == original.messages
        assert await cps_b.list("run-w") == [original.meta]
    finally:
        await host_a.close()
        await host_b.close()


async def test_nothing_of_a_refused_write_stays_in_the_bucket(
    server: NatsServer, stream: str
) -> None:
    store = await JetStreamStore.connect(server.url, stream)
    try:
        cps, _ = await bind_run_stores(store, Cli(server.url))
        assert cps is not None
        first = checkpoint("run-r", "first")
        await cps.put(first)
        nc = store.connection
        before = (await nc.jsm().stream_info(stream_of(f"{stream}_CHECKPOINTS"))).state.messages
        clash = same_id_other_content(first)
        with pytest.raises(StoreCorrupted):
            await cps.put(clash)
        after = (await nc.jsm().stream_info(stream_of(f"{stream}_CHECKPOINTS"))).state.messages
        assert after == before
    finally:
        await store.close()


async def test_listing_a_runs_checkpoints_reads_its_index_not_every_name_in_the_bucket(
    server: NatsServer, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await JetStreamStore.connect(server.url, stream)
    try:
        cps, _ = await bind_run_stores(store, Cli(server.url))
        assert cps is not None
        for other in range(5):
            await cps.put(checkpoint(f"other-{other}"))
        mine = [checkpoint("indexed") for _ in range(3)]
        for cp in mine:
            await cps.put(cp)
        assert await cps.delete("indexed", mine[1].checkpoint_id)

        def no_scan(prefix: str = "") -> list[str]:
            raise AssertionError("listing one run read every object name of the bucket")

        monkeypatch.setattr(cps.bucket, "names", no_scan)
        listed = [m.checkpoint_id for m in await cps.list("indexed")]
        assert listed == [mine[0].checkpoint_id, mine[2].checkpoint_id]
    finally:
        await store.close()


async def test_chunks_a_crashed_write_left_without_a_meta_are_swept_and_live_objects_kept(
    server: NatsServer, stream: str
) -> None:
    store = await JetStreamStore.connect(server.url, stream)
    try:
        cps, blobs = await bind_run_stores(store, Cli(server.url))
        assert cps is not None
        assert blobs is not None
        kept = checkpoint("swept-run")
        await cps.put(kept)
        digest, _ = await blobs.put("swept-run", b"attached bytes" * 20_000)  # 3 chunks
        bucket = bucket_name(stream, CHECKPOINTS)
        js = store.connection.jetstream()
        for n in range(3):  # a writer killed after its chunks, before its meta
            await js.publish(f"$O.{bucket}.C.crashedwrite", b"x" * 1000, headers={"n": str(n)})
        info = await store.connection.jsm().stream_info(stream_of(bucket))
        assert await sweep_orphan_chunks((cps, blobs)) == 0  # too young: may be in progress
        assert await cps.bucket.sweep_orphans(min_age_s=0) == 1
        after = await store.connection.jsm().stream_info(stream_of(bucket))
        assert after.state.messages == info.state.messages - 3
        assert await blobs.bucket.sweep_orphans(min_age_s=0) == 0
        assert (await cps.get("swept-run", kept.checkpoint_id)).messages == kept.messages
        assert await blobs.get("swept-run", digest) == b"attached bytes" * 20_000
    finally:
        await store.close()
