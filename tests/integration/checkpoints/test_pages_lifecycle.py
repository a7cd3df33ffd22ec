"""Message pages through a run's life (issue 31, items 2 and 7): Verify and Recover name a
page that is missing or damaged; ``migrate`` carries pages file -> JetStream -> file;
``Delete`` removes them on both backends; a prune keeps what its kept rebase references and
checkpoints what it drops through the pages."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest
from journald_client import errors

from journald.cli.migrate import main
from journald.clock import utc_ts
from journald.core.fold import fold
from journald.core.pages import bytes_resolver, referenced_pages
from journald.core.rebase_chunks import log_messages
from journald.storage.checkpoint_base import pre_prune_hook
from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore
from journald.storage.file.store import FileStore
from journald.storage.pages import PageStore, paged_checkpoints
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.jetstream.test_jetstream_side_data import objects_of
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until

READ = 200 * 1024  # each tool turn is a page of its own


def paged_run(client: jc.Client, run_id: str) -> tuple[str, list[dict[str, object]]]:
    """A run of three large reads, checkpointed, grown, then restored (a paged rebase)."""
    with client.start(run_id, FP, "read") as run:
        for i in range(3):
            call = {"type": "tool_use", "id": f"r{i}", "name": "read", "input": "{}"}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(f"r{i}", f"{run_id} {i} " + "z" * READ)
        run.assistant("read", stop_reason="end_turn")
    cp = client.checkpoint(run_id, label="reads")
    want = client.fold(run_id).messages
    with client.resume(run_id, FP) as run:
        run.user("more")
    client.restore(run_id, cp.checkpoint_id)
    rebase = list(client.load(run_id))[-1]
    assert rebase.payload["pages"]
    return cp.checkpoint_id, want


def pages_of(client: jc.Client, run_id: str) -> list[str]:
    rebases = [r.payload for r in client.load(run_id) if r.kind == "rebase"]
    return [ref.sha256 for ref in referenced_pages(rebases)]


def test_verify_and_recover_name_a_page_that_is_missing_or_damaged(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        paged_run(client, "lossy")
        client.verify("lossy")
        page = d.data_dir / "sessions" / "lossy" / "attachments" / pages_of(client, "lossy")[0]
        raw = page.read_bytes()
        page.write_bytes(raw.replace(b"zzz", b"zzy", 1))
        with pytest.raises(errors.StoreCorrupted, match=page.name) as damaged:
            client.verify("lossy")
        assert damaged.value.metadata["page"] == page.name
        page.unlink()
        with pytest.raises(errors.StoreCorrupted, match=page.name):
            client.verify("lossy")
        with pytest.raises(errors.StoreCorrupted, match=page.name):
            client.recover("lossy")
        page.write_bytes(raw)
        client.verify("lossy")


def test_migrate_carries_pages_both_ways_and_delete_removes_them(tmp_path: Path) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    src = tmp_path / "a"
    for name in ("d1", "d2", "d3"):
        (tmp_path / name).mkdir()
    with Daemon(tmp_path / "d1", "file", data_dir=src) as d, jc.connect(str(d.socket)) as client:
        cp_id, want = paged_run(client, "moving")
        # a fork of the head: its pages are referenced by its records alone (no checkpoint)
        client.fork("moving", new_run_id="moving-fork")
        assert client.checkpoints("moving-fork") == []
    to_js = ["--quiet", "--from", f"file:{src}", "--to", f"jetstream:{url}/{stream}"]
    assert main(to_js) == 0
    sock = Path(f"/tmp/jd-pages-{os.getpid()}-{stream}/s")
    js_args = ("--nats-url", url, "--stream", stream)
    with (
        Daemon(tmp_path / "d2", "jetstream", *js_args, socket=sock) as d,
        jc.connect(str(d.socket)) as client,
    ):
        for run_id in ("moving", "moving-fork"):
            client.verify(run_id)
            assert client.fold(run_id).messages == want
        page_names = {f"moving/{p}" for p in pages_of(client, "moving")}
        assert page_names <= set(asyncio.run(objects_of(url, stream, "moving")))
        back = tmp_path / "c"
        argv = ["--quiet", "--from", f"jetstream:{url}/{stream}", "--to", f"file:{back}"]
        assert main([*argv, "moving"]) == 0
        assert client.delete("moving")
        assert asyncio.run(objects_of(url, stream, "moving")) == []
    with Daemon(tmp_path / "d3", "file", data_dir=back) as d, jc.connect(str(d.socket)) as client:
        client.verify("moving")
        assert client.fold("moving").messages == want
        client.restore("moving", cp_id)  # the migrated checkpoint reads its pages back
        assert client.fold("moving").messages == want
        assert client.delete("moving")
        assert not (back / "sessions" / "moving").exists()


def test_a_prune_checkpoints_what_it_drops_through_pages_and_keeps_the_pages_it_needs(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        _, want = paged_run(client, "pruned")
        with client.resume("pruned", FP) as run:
            run.user("after the restore")
        head = client.fold("pruned").messages
        # a second restore: the prune keeps it and drops the first (paged) one before it
        client.restore("pruned", client.checkpoint("pruned", label="head").checkpoint_id)
        before_cut = client.fold("pruned").messages

    async def scenario() -> None:
        store = FileStore(data)
        attachments = FileAttachmentStore.colocated_with(store.sessions_dir)
        cps = paged_checkpoints(FileCheckpointStore.colocated_with(store.sessions_dir), attachments)
        report = await store.prune("pruned", before=pre_prune_hook(cps, utc_ts))
        assert report.pruned
        metas = [m for m in await cps.list("pruned") if m.trigger == "pre_prune"]
        cp = await cps.get("pruned", metas[0].checkpoint_id)
        assert cp.messages == head  # the conversation just before the kept rebase, whole
        kept = await store.load("pruned")
        rebases = [r for r in kept if r.kind == "rebase"]
        raw = await PageStore(attachments).read(
            "pruned", referenced_pages([r.payload for r in rebases])
        )
        # the fold keeps the rebase's pages sealed: read back through the same pages
        folded = fold(kept, pages=bytes_resolver(raw)).messages
        assert log_messages(folded, bytes_resolver(raw)) == before_cut
        await store.close()

    asyncio.run(scenario())
    assert want != head


def test_a_lease_end_saves_a_paged_snapshot_and_an_open_names_a_missing_page(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    snap = data / "sessions" / "snap" / "checkpoints" / "fold-snapshot.json"
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        _, want = paged_run(client, "snap")
        with client.resume("snap", FP) as run:
            run.user("one more")
        want = client.fold("snap").messages

        def saved() -> dict[str, Any]:
            doc = json.loads(snap.read_bytes())["snapshot"]
            assert isinstance(doc, dict)
            return doc

        last = client.fold("snap").last_seq
        wait_until(
            lambda: snap.exists() and saved()["last_seq"] == last,
            what="the lease end to save the fold snapshot",
        )
        doc = saved()
        assert doc["v"] == 2
        assert doc["message_pages"]
        assert snap.stat().st_size < 64 * 1024  # references and a tail, not 600 KB of reads
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        with client.resume("snap", FP) as run:  # folded from the paged snapshot
            assert run.state.messages == want
        page = data / "sessions" / "snap" / "attachments" / doc["message_pages"][0]["sha256"]
        raw = page.read_bytes()
        page.unlink()
        with pytest.raises(errors.StoreCorrupted, match=page.name):
            client.resume("snap", FP)  # the snapshot is not used; the rebase needs it too
        page.write_bytes(raw)
        with client.resume("snap", FP) as run:
            assert run.state.messages == want
