"""Migration file -> JetStream -> file keeps every byte and verifies on both sides."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from journald.cli.migrate import main, new_progress
from journald.core.errors import BackendUnavailable, InvalidArgumentError, SessionExists
from journald.storage.file.segments import frame
from journald.storage.file.store import FileStore
from journald.storage.jetstream.checkpoint_store import bind_run_stores
from journald.storage.jetstream.config import Cli
from journald.storage.jetstream.store import JetStreamStore
from journald.storage.migrate import migrate
from journald.storage.registry import BackendOptions, parse_location
from tests.builders import JournalBuilder, assistant_payload, text, tool_use, user_payload
from tests.storage.backend_jetstream import fresh_stream


async def fill(store: FileStore, run_id: str, turns: int) -> JournalBuilder:
    b = JournalBuilder(run_id, prompt=f"prompt of {run_id} — ünïcode ✓")
    for i in range(turns):
        b.turn([f"{run_id}-{i}a", f"{run_id}-{i}b"])
        b.add("user", user_payload(f"follow-up {i}"))
        # framework state migrates like any record (inline bytes and a deletion)
        b.add("state", {"namespace": "lg", "key": f"k{i}", "type": "msgpack", "data": "/+8="})
        b.add("state", {"namespace": "lg", "key": f"k{i - 1}", "deleted": True})
    journal = await store.create(b.records[0])
    await journal.append(b.records[1:])
    await journal.close()
    return b


def on_disk(data_dir: Path, run_id: str) -> bytes:
    return (data_dir / "sessions" / run_id / "journal.jsonl").read_bytes()


async def test_a_file_run_round_trips_through_jetstream_byte_for_byte(tmp_path: Path) -> None:
    src = FileStore(tmp_path / "a", segment_max_records=4)  # the source is segmented
    built = {rid: await fill(src, rid, turns) for rid, turns in (("mig-1", 3), ("mig-2", 1))}
    url, name, _ = await fresh_stream()
    js = await JetStreamStore.connect(url, name)
    back = FileStore(tmp_path / "b", segmentation=False)
    try:
        with new_progress() as progress:
            there = await migrate(src, js, None, progress)
        assert sorted(r.run_id for r in there) == ["mig-1", "mig-2"]
        returned = await migrate(js, back, ["mig-1", "mig-2"])
        for rid, b in built.items():
            expected = [r.raw for r in b.records]
            assert [r.raw for r in await js.load(rid)] == expected
            assert [r.raw for r in await back.load(rid)] == expected
            assert on_disk(tmp_path / "b", rid) == b"".join(frame(r) for r in b.records)
            assert (await back.verify(rid)).last_hash == b.records[-1].hash
            assert (await js.verify(rid)).last_hash == b.records[-1].hash
        assert {r.run_id: r.last_hash for r in returned} == {
            rid: b.records[-1].hash for rid, b in built.items()
        }
    finally:
        await js.close()
        await src.close()
        await back.close()


async def test_migration_refuses_to_overwrite_an_existing_run_before_writing_anything(
    tmp_path: Path,
) -> None:
    src = FileStore(tmp_path / "a")
    await fill(src, "keep-1", 1)
    await fill(src, "keep-2", 1)
    url, name, _ = await fresh_stream()
    js = await JetStreamStore.connect(url, name)
    try:
        await migrate(src, js, ["keep-2"])
        with pytest.raises(SessionExists, match="keep-2"):
            await migrate(src, js, None)
        assert not await js.exists("keep-1")
    finally:
        await js.close()
        await src.close()


async def test_the_command_line_migrates_both_ways(tmp_path: Path) -> None:
    src = FileStore(tmp_path / "a")
    b = await fill(src, "cli-run", 2)
    await src.close()
    url, name, _ = await fresh_stream()
    to_js = ["--quiet", "--from", f"file:{tmp_path / 'a'}", "--to", f"jetstream:{url}/{name}"]
    assert await_main(to_js) == 0
    assert await_main(to_js) == 1  # already there: refused, nothing overwritten
    back = ["--from", f"jetstream:{url}/{name}", "--to", f"file:{tmp_path / 'c'}", "cli-run"]
    assert await_main(back) == 0
    assert on_disk(tmp_path / "c", "cli-run") == b"".join(frame(r) for r in b.records)


async def test_a_migration_to_memory_verifies_the_runs_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "a"
    src = FileStore(data)
    await fill(src, "ok-run", 2)
    await fill(src, "bad-run", 1)
    await src.close()

    def files() -> dict[str, bytes]:
        return {
            str(p.relative_to(data)): p.read_bytes()
            for p in sorted(data.rglob("*"))
            if p.is_file() and p.name != "daemon.lock"
        }

    before = files()
    assert await_main(["--quiet", "--from", f"file:{data}", "--to", "memory:"]) == 0
    journal = data / "sessions" / "bad-run" / "journal.jsonl"
    damaged = journal.read_bytes().replace(b"prompt of bad-run", b"prompt of BAD-run")
    journal.write_bytes(damaged)
    assert await_main(["--quiet", "--from", f"file:{data}", "--to", "memory:"]) == 1
    assert files() == {**before, "sessions/bad-run/journal.jsonl": damaged}


def await_main(argv: list[str]) -> int:
    # main() runs its own event loop; run it in a worker thread from this async test.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(main, argv).result(timeout=60)


def test_store_locations_parse_into_backend_and_options() -> None:
    assert parse_location("file:/var/x") == ("file", BackendOptions(data_dir=Path("/var/x")))
    assert parse_location("jetstream:nats://h:4222/JOURNALD") == (
        "jetstream",
        BackendOptions(nats_url="nats://h:4222", stream="JOURNALD"),
    )
    assert parse_location("memory:") == ("memory", BackendOptions())
    for bad in ("jetstream:nats://h:4222", "jetstream:nats://h:4222/", "s3:x", "file:"):
        with pytest.raises(InvalidArgumentError, match="use"):
            parse_location(bad)


async def test_a_read_only_store_reads_a_work_queue_stream_without_consuming_and_never_writes(
    tmp_path: Path,
) -> None:
    url, name, prefix = await fresh_stream(retention="workqueue")
    b = JournalBuilder("queued-run")
    b.turn(["q1", "q2"])
    nc = await nats.connect(url)
    try:
        for rec in b.records:
            await nc.jetstream().publish(f"{prefix}.queued-run.{rec.seq}", rec.raw)
        store = await JetStreamStore.connect(url, name, read_only=True)
        try:
            assert [p.what.split(",")[0] for p in store.unsafe] == ["retention is workqueue"]
            assert [i.run_id for i in await store.list()] == ["queued-run"]
            assert [r.raw for r in await store.load("queued-run")] == [r.raw for r in b.records]
            assert (await store.verify("queued-run")).last_hash == b.records[-1].hash
            with pytest.raises(BackendUnavailable, match="read-only"):
                await store.open("queued-run")
            with pytest.raises(BackendUnavailable, match="read-only"):
                await store.delete("queued-run")
            with pytest.raises(BackendUnavailable, match="read-only"):
                await store.create(JournalBuilder("new-run").records[0])
        finally:
            await store.close()
        info = await nc.jsm().stream_info(name)
        assert info.state.messages == len(b.records)  # nothing consumed, nothing added
        assert info.state.consumer_count == 0
    finally:
        await nc.close()


async def run_with_side_data(data_dir: Path, run_id: str) -> dict[str, bytes]:
    """A file run with an attachment a tool result references and two checkpoints; returns
    every file of the run (journal, checkpoint files, attachment) by its relative path."""
    from journald.core.checkpoints import attachment_block
    from journald.core.fold import fold
    from journald.storage.checkpoint_base import make_checkpoint
    from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore

    store = FileStore(data_dir, segmentation=False)
    sessions = str(data_dir / "sessions")
    blobs = FileAttachmentStore.colocated_with(sessions)
    cps = FileCheckpointStore.colocated_with(sessions)
    picture = bytes(range(256)) * 1200  # 300 KiB: several Object Store chunks
    b = JournalBuilder(run_id, prompt="look at this")
    b.add("assistant", assistant_payload([tool_use("t1", "snap")]))
    journal = await store.create(b.records[0])
    digest, _ = await blobs.put(run_id, picture)
    block = attachment_block(digest, len(picture), "image/png", "snap.png")
    b.add(
        "tool_result", {"tool_use_id": "t1", "content": [block], "is_error": False, "remote": False}
    )
    b.add("assistant", assistant_payload([text("a picture")]))
    for i in range(2):
        b.add("user", user_payload(f"question {i}"))
        b.add("assistant", assistant_payload([text(f"answer {i}")]))
        st = fold(b.records)
        await cps.put(
            make_checkpoint(
                run_id=run_id,
                trigger="manual",
                label=f"cp {i}",
                seq=st.last_seq,
                messages=st.messages,
                created="2026-12-01T12:00:00Z",
                model="m",
                cwd="/w",
            )
        )
    await journal.append(b.records[1:])
    await journal.close()
    await store.close()
    return run_files(data_dir / "sessions" / run_id)


def run_files(root: Path) -> dict[str, bytes]:
    """The journal, checkpoint files and attachments of a file run, by relative path."""
    keep = ("checkpoints", "attachments")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and (p.parent.name in keep or p.name == "journal.jsonl")
    }


async def test_a_run_with_checkpoints_and_an_attachment_round_trips_byte_identical(
    tmp_path: Path,
) -> None:
    before = await run_with_side_data(tmp_path / "a", "side-run")
    assert sum(k.startswith("checkpoints/") for k in before) == 2
    assert sum(k.startswith("attachments/") for k in before) == 1
    url, name, _ = await fresh_stream()
    there = f"jetstream:{url}/{name}"
    assert await_main(["--quiet", "--from", f"file:{tmp_path / 'a'}", "--to", there]) == 0
    js = await JetStreamStore.connect(url, name)
    try:
        cps, blobs = await bind_run_stores(js, Cli(url))
        assert cps is not None
        assert blobs is not None
        assert len(await cps.list("side-run")) == 2
        [digest] = [k.removeprefix("attachments/") for k in before if "attachments/" in k]
        assert await blobs.get("side-run", digest) == before[f"attachments/{digest}"]
    finally:
        await js.close()
    assert await_main(["--quiet", "--from", there, "--to", f"file:{tmp_path / 'b'}"]) == 0
    assert run_files(tmp_path / "b" / "sessions" / "side-run") == before


async def test_a_runs_owner_on_a_shared_daemon_travels_with_it_both_ways(tmp_path: Path) -> None:
    from journald.storage.checkpoint_base import OWNER
    from journald.storage.file.checkpoint_store import FileCheckpointStore

    await run_with_side_data(tmp_path / "a", "owned-run")
    sessions = str(tmp_path / "a" / "sessions")
    await FileCheckpointStore.colocated_with(sessions).save_mark("owned-run", {"uid": 4242}, OWNER)
    url, name, _ = await fresh_stream()
    there = f"jetstream:{url}/{name}"
    assert await_main(["--quiet", "--from", f"file:{tmp_path / 'a'}", "--to", there]) == 0
    assert await_main(["--quiet", "--from", there, "--to", f"file:{tmp_path / 'b'}"]) == 0
    back = FileCheckpointStore.colocated_with(str(tmp_path / "b" / "sessions"))
    assert await back.load_mark("owned-run", OWNER) == {"uid": 4242}
