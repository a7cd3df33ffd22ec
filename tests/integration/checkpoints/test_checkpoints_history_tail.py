"""History on a long segmented run reads from the tail: the last page of a 100k-message run
is served after its early segments are unreadable, while a read of the records at the start (which
needs them) fails. What makes it possible are fold marks (message count at a seq, every 1000
records) that the daemon takes as a writer's Open folds the run and as records are committed,
and saves when the lease ends with the run's fold snapshot (``fold-mark.json`` next to the
run's checkpoints; a read never writes it)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.storage.file.store import FileStore
from tests.builders import TS, JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, error_of, stub
from tests.waiting import wait_until

MESSAGES = 100_000
BATCH = 2500
SEGMENT = 4000
pytestmark = pytest.mark.slow


async def write_long_run(data: Path) -> None:
    """The run's first records, written with the file store itself (fast): prompt, then
    alternating assistant replies and user follow-ups, one message each."""
    b = JournalBuilder("long")
    for seq in range(2, MESSAGES):
        if seq % 2 == 0:
            b.add("assistant", assistant_payload([text(f"a{seq}")], iteration=seq // 2))
        else:
            b.add("user", user_payload(f"u{seq}"))
    store = FileStore(data, segment_max_records=SEGMENT)
    journal = await store.create(b.records[0])
    for i in range(1, len(b.records), BATCH):
        await journal.append(b.records[i : i + BATCH])
    await journal.close()
    await store.close()


def test_the_last_page_of_a_100k_message_run_is_served_from_its_last_segments(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    asyncio.run(write_long_run(data))
    last = MESSAGES
    with Daemon(tmp_path, "file", "--segment-max-records", str(SEGMENT), data_dir=data) as d:
        # the lease carries the folded state of 100k messages: above gRPC's default 4 MiB
        big = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        s = pbg.JournalServiceStub(grpc.insecure_channel(d.target, options=big))
        # a read of a run the daemon did not write folds it (and writes nothing)
        assert (
            s.History(pb.HistoryRequest(run_id="long", limit=0, view=pb.HISTORY_VIEW_STATE)).total
            == MESSAGES - 1
        )
        mark_file = data / "sessions" / "long" / "checkpoints" / "fold-mark.json"
        assert not mark_file.exists()
        lease = Lease(s, "long", mode=pb.OPEN_MODE_RESUME)  # a writer resumes the run ...
        lease.append(
            pb.Record(
                seq=last,
                ts=TS,
                assistant=pb.AssistantPayload(
                    message=pb.Message(role="assistant", content_json=blocks(text(f"a{last}"))),
                    iteration=last // 2,
                    stop_reason="end_turn",
                ),
            )
        )
        lease.close()  # ... and its lease ends: the daemon saves the marks it took
        mark_file = data / "sessions" / "long" / "checkpoints" / "fold-mark.json"
        wait_until(
            lambda: (
                mark_file.exists()
                and json.loads(mark_file.read_bytes())["marks"][-1]["seq"] == last
            ),
            what="the daemon to save a fold mark for the append",
            timeout_s=90,
        )

    run_dir = data / "sessions" / "long"
    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    early = [seg for seg in manifest["segments"] if seg["last_seq"] < last - 1000]
    assert len(early) >= 15
    for seg in early:  # a read that needed them would now fail loudly
        path = run_dir / "segments" / seg["file"]
        st = path.stat()
        # rotted in place, size and mtime kept: Open's stat of the sealed segments cannot
        # see it (a deleted one it refuses at once), only a read of their bytes can
        path.write_bytes(b"\0" * st.st_size)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d.target)
        total = s.History(
            pb.HistoryRequest(run_id="long", limit=0, view=pb.HISTORY_VIEW_STATE)
        ).total
        assert total == MESSAGES
        page = s.History(
            pb.HistoryRequest(
                run_id="long", offset=total - 50, limit=50, view=pb.HISTORY_VIEW_STATE
            )
        )
        assert (page.offset, page.next_offset, page.total) == (total - 50, total, total)
        got = [(m.role, json.loads(m.content_json)[0]["text"]) for m in page.messages]
        want = [
            ("assistant" if q % 2 == 0 else "user", f"{'a' if q % 2 == 0 else 'u'}{q}")
            for q in range(last - 49, last + 1)
        ]
        assert got == want
        # the start of the conversation comes from the snapshot the lease saved (records
        # before it are not folded again); a read of the records themselves finds the damage
        first = s.History(
            pb.HistoryRequest(run_id="long", offset=0, limit=10, view=pb.HISTORY_VIEW_STATE)
        )
        assert [json.loads(m.content_json)[0]["text"] for m in first.messages][1:3] == [
            "a2",
            "u3",
        ]
        with pytest.raises(grpc.RpcError) as info:
            list(s.Load(pb.LoadRequest(run_id="long", from_seq=1)))
        assert error_of(info.value).code == "store_corrupted"
