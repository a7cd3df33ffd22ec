"""kill -9 of the daemon while a lease end writes a fold snapshot whose page references fill
a chunk (docs/design.md#fold-snapshots, version 4): at ``snapshot_before_write`` (the new
pages and page-reference chunks stored, the snapshot not written) and at
``snapshot_after_write`` (the snapshot durable, the fold marks not saved).

After a clean restart: every acknowledged record is there byte for byte, ``Verify`` passes,
every chunk the stored snapshot names and every page those chunks name is there and hashes
to its name, and the dormant reads return the acknowledged conversation. The run: ~120
messages of just over a page each (one page each), then 12 more under the armed daemon,
so the references fill their first chunk during that lease.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from journald_client.pb import journal_pb2 as pb

from journald.server.convert import fingerprint_to_pb
from tests.builders import FP, TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, assistant_pb, blocks, stub

RUN = "chunked"
BODY = 132 * 1024  # characters: a message is just over a page (128 KiB)
FIRST, LATE = 120, 12
pytestmark = pytest.mark.slow


def body(i: int) -> str:
    return f"m{i} " + chr(ord("a") + i % 26) * BODY


class Resumed(Lease):
    """A resume with a message window of one (the whole conversation is ~16 MiB)."""

    def __init__(self, s: Any) -> None:
        self.stub, self.run_id = s, RUN
        self.call = s.Open(
            pb.OpenRequest(
                run_id=RUN,
                mode=pb.OPEN_MODE_RESUME,
                fingerprint=fingerprint_to_pb(FP),
                message_window=1,
                client=pb.ClientInfo(name="tester", pid=4242, host="testhost", cwd="/work"),
            )
        )
        self.lease = next(iter(self.call)).lease
        self.seq = self.lease.last_seq


def append(s: Any, first: int, n: int) -> None:
    lease = Lease(s, RUN) if first == 0 else Resumed(s)
    for i in range(first, first + n):
        if i % 2 == 0:
            payload: dict[str, Any] = {"assistant": assistant_pb([text(body(i))], "end_turn")}
        else:
            payload = {"user": pb.UserPayload(content_json=blocks(text(body(i))))}
        lease.append(pb.Record(seq=lease.seq + 1, ts=TS, **payload))
    lease.close()


def run_dir(data: Path) -> Path:
    return data / "sessions" / RUN


def snapshot(data: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (run_dir(data) / "checkpoints" / "fold-snapshot.json").read_bytes()
    )["snapshot"]
    return doc


def checked(data: Path, sha: str) -> bytes:
    raw = (run_dir(data) / "attachments" / sha).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == sha
    return raw


def tail(s: Any, n: int) -> list[Any]:
    total = s.Fold(pb.FoldRequest(run_id=RUN, omit_messages=True)).state.messages_total
    page = s.History(pb.HistoryRequest(run_id=RUN, offset=total - n, limit=n))
    return [json.loads(m.content_json) for m in page.messages]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("prep")
    with Daemon(base, "file") as d:
        append(stub(d.target), 0, FIRST)
    return base / "data"


@pytest.mark.parametrize("point", ["snapshot_before_write", "snapshot_after_write"])
def test_a_kill_while_a_lease_end_writes_a_chunked_snapshot_loses_no_record_and_no_chunk(
    prepared: Path, tmp_path: Path, point: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    (data / "daemon.lock").unlink(missing_ok=True)
    before = snapshot(data)
    assert "page_chunks" not in before  # fewer than 128 pages so far
    armed = Daemon(tmp_path, "file", data_dir=data, env={"JOURNALD_FAILPOINTS": f"{point}=kill"})
    armed.start()
    s = stub(armed.target)
    append(s, FIRST, LATE)  # acknowledged; the lease end's hook runs after the release
    armed.proc.wait(timeout=60)  # type: ignore[union-attr]  # it dies at the point
    assert armed.proc.returncode == -9  # type: ignore[union-attr]

    after = snapshot(data)
    if point == "snapshot_before_write":
        assert after == before  # the old snapshot stands
    else:
        assert after["v"] == 4
        assert len(after["page_chunks"]) == 1
    for chunk in after.get("page_chunks", []):  # every chunk it names, and their pages
        for ref in json.loads(checked(data, chunk["sha256"]))["refs"]:
            checked(data, ref["sha256"])
    for ref in after["message_pages"]:
        checked(data, ref["sha256"])

    with Daemon(tmp_path, "file", data_dir=data) as clean:
        s = stub(clean.target)
        folded = s.Fold(pb.FoldRequest(run_id=RUN, omit_messages=True)).state
        assert folded.last_seq == 1 + FIRST + LATE  # the meta record, then every append
        s.Verify(pb.VerifyRequest(run_id=RUN))
        want = [[text(body(i))] for i in range(FIRST + LATE - 4, FIRST + LATE)]
        assert tail(s, 4) == want
