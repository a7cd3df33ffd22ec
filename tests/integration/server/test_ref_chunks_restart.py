"""A held run sealed past 128 message pages: its page references are sealed into a chunk
(docs/design.md#fold-snapshots, version 4), and after a restart the dormant reads (History
tail in each view, windowed Open, ``Fold(omit_messages)``) return what they returned while
the run was held. A chunk deleted from the run's ``attachments/``: the scrubber and
``journald verify`` say ``store_corrupted`` naming it, and ``journald recover`` drops the
snapshot (a cache) so the run verifies and reads again (issue 31).

One real daemon on the file backend writes ~18 MiB of conversation (135 messages of just over
a page each) through one lease, once for the module."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from journald_client.pb import journal_pb2 as pb

from journald.server.convert import fingerprint_to_pb
from tests.builders import FP, TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, assistant_pb, blocks, stub, until_unlocked
from tests.integration.server.test_damaged_runs import cli
from tests.integration.server.test_scrub import FAST_SCRUB, NO_SCRUB, statuses
from tests.waiting import wait_until

RUN = "chunked"
MESSAGES = 135  # one page each: 128 sealed into a chunk, the rest loose or in the tail
BODY = 132 * 1024  # characters: a message is just over a page (128 KiB)


def body(i: int) -> str:
    return f"m{i} " + chr(ord("a") + i % 26) * BODY


def write_run(s: Any) -> None:
    lease = Lease(s, RUN)
    for i in range(MESSAGES):
        if i % 2 == 0:
            payload: dict[str, Any] = {"assistant": assistant_pb([text(body(i))], "end_turn")}
        else:
            payload = {"user": pb.UserPayload(content_json=blocks(text(body(i))))}
        lease.append(pb.Record(seq=lease.seq + 1, ts=TS, **payload))
    lease.close()


def snapshot(data: Path) -> dict[str, Any]:
    path = data / "sessions" / RUN / "checkpoints" / "fold-snapshot.json"
    doc: dict[str, Any] = json.loads(path.read_bytes())["snapshot"]
    return doc


def snapshot_seq(data: Path) -> int:
    try:
        return int(snapshot(data)["last_seq"])
    except FileNotFoundError:
        return 0


def reads(s: Any) -> dict[str, Any]:
    """What the dormant reads return: History tail pages of both views, a windowed Open,
    ``Fold(omit_messages)``."""
    out: dict[str, Any] = {}
    folded = s.Fold(pb.FoldRequest(run_id=RUN, omit_messages=True))
    total = folded.state.messages_total
    out["fold"] = (total, folded.state.last_seq, folded.state.messages_offset)
    for name, view in (("state", pb.HISTORY_VIEW_STATE), ("cleaned", pb.HISTORY_VIEW_UNSPECIFIED)):
        page = s.History(pb.HistoryRequest(run_id=RUN, view=view, offset=total - 4, limit=4))
        out[name] = (page.total, [m.content_json for m in page.messages])
    far = s.History(pb.HistoryRequest(run_id=RUN, view=pb.HISTORY_VIEW_STATE, offset=3, limit=2))
    out["far"] = [m.content_json for m in far.messages]
    call = s.Open(
        pb.OpenRequest(
            run_id=RUN,
            mode=pb.OPEN_MODE_RESUME,
            fingerprint=fingerprint_to_pb(FP),
            message_window=3,
        )
    )
    opened = next(iter(call)).lease
    out["open"] = (opened.state.messages_offset, [m.content_json for m in opened.state.messages])
    call.cancel()
    return out


def expected_tail(n: int) -> list[Any]:
    return [[text(body(i))] for i in range(MESSAGES - n, MESSAGES)]


def parsed(contents: list[bytes]) -> list[Any]:
    return [json.loads(c) for c in contents]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("chunked")
    with Daemon(tmp, "file", *NO_SCRUB) as d:
        s = stub(d.target)
        write_run(s)
        wait_until(lambda: snapshot_seq(d.data_dir) > MESSAGES, what="the lease end")
        held = reads(s)
    return tmp / "data", held


def test_a_run_sealed_past_128_pages_reads_the_same_after_a_restart(
    pristine: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine[0], tmp_path / "data"))
    (data / "daemon.lock").unlink(missing_ok=True)
    doc = snapshot(data)
    assert doc["v"] == 4
    assert len(doc["page_chunks"]) == 1  # the first 128 pages, named by one reference
    assert len(doc["message_pages"]) < 128
    held = pristine[1]
    assert parsed(held["state"][1][-3:]) == expected_tail(3)
    assert parsed(held["open"][1]) == expected_tail(len(held["open"][1]))
    assert parsed(held["far"]) == [[text(body(i))] for i in (2, 3)]  # the prompt is message 0
    with Daemon(tmp_path, "file", *NO_SCRUB, data_dir=data) as d:
        dormant = reads(stub(d.target))
    assert dormant == held


def test_a_missing_chunk_is_found_by_scrub_and_verify_and_recover_drops_the_snapshot(
    pristine: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine[0], tmp_path / "data"))
    (data / "daemon.lock").unlink(missing_ok=True)
    chunk = snapshot(data)["page_chunks"][0]["sha256"]
    (data / "sessions" / RUN / "attachments" / chunk).unlink()
    with Daemon(tmp_path, "file", *FAST_SCRUB, data_dir=data) as d:
        s = stub(d.target)
        wait_until(lambda: statuses(s)[RUN][0] == "corrupted", what="a pass flags the run")
        error = statuses(s)[RUN][1]
        assert f"message-page reference chunk {chunk}" in error, error
        res = cli(d, "verify", RUN)
        assert res.returncode != 0
        assert "store_corrupted" in res.stdout + res.stderr, res.stdout + res.stderr
        assert chunk in res.stdout + res.stderr
        assert cli(d, "recover", RUN).returncode == 0
        assert cli(d, "verify", RUN).returncode == 0
        assert reads(s) == pristine[1]  # folded from its records: the same conversation


def test_delete_removes_the_runs_chunks_with_its_pages(
    pristine: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine[0], tmp_path / "data"))
    (data / "daemon.lock").unlink(missing_ok=True)
    chunk = data / "sessions" / RUN / "attachments" / snapshot(data)["page_chunks"][0]["sha256"]
    assert chunk.exists()
    with Daemon(tmp_path, "file", *NO_SCRUB, data_dir=data) as d:
        s = stub(d.target)
        reads(s)  # a dormant read leaves the chunk where it is
        assert chunk.exists()
        assert until_unlocked(lambda: s.Delete(pb.DeleteRequest(run_id=RUN))).deleted
    assert not chunk.exists()
    assert not (data / "sessions" / RUN).exists()
