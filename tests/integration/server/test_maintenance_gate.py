"""A maintenance write passes the daemon's one record gate like any append: the rebase a
recovery writes to record its hole is refused over ``--max-record-bytes`` before anything
moves (docs/design.md#the-run-writer)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.builders import JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import error_of, stub
from tests.integration.server.test_damaged_runs import flip, write_runs

LIMIT_BYTES = 3000


def run_files(run_dir: Path) -> dict[str, bytes]:
    """The run's records, manifest and listing (the lock file's holder line aside)."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != "journal.lock"
    }


def test_a_recovery_whose_rebase_is_over_the_record_limit_is_refused_and_moves_nothing(
    tmp_path: Path,
) -> None:
    tmp = tmp_path
    data = tmp / "data"
    b = JournalBuilder("big", prompt="a long conversation")
    for i in range(4):  # each record fits the limit; the rebuilt conversation does not
        b.add("assistant", assistant_payload([text(f"answer {i} " + "x" * 1000)], i + 1))
        b.add("user", user_payload(f"follow-up {i}"))
    assert all(len(r.raw) < LIMIT_BYTES for r in b.records)
    write_runs(data, {"big": b.records})
    flip(data, "big", line=2)  # an interior record: recovery must move it out
    before = run_files(data / "sessions" / "big")

    with Daemon(tmp, "file", "--max-record-bytes", str(LIMIT_BYTES), data_dir=data) as d:
        with pytest.raises(grpc.RpcError) as refused:
            stub(d.target).Recover(pb.RecoverRequest(run_id="big"))
        err = error_of(refused.value)
        assert err.code == "invalid_record"
        assert err.metadata["field"] == "record"
        assert f"limit is {LIMIT_BYTES} bytes (--max-record-bytes)" in err.message
    assert run_files(data / "sessions" / "big") == before  # no rewritten volume
    assert not (data / "quarantine").exists() or not any((data / "quarantine").iterdir())

    with Daemon(tmp, "file", data_dir=data) as d:  # the default limit holds the rebase
        done = stub(d.target).Recover(pb.RecoverRequest(run_id="big"))
        assert (done.quarantined, done.rebase_seq) == (1, 10)
