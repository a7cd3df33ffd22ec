"""Refused means nothing written (issue 31, item 5): every refusal of Checkpoint, Restore,
Fork, ImportCheckpoint and Compact leaves the data directory byte for byte as it was: no
``pre_restore`` or ``pre_compaction`` checkpoint, no new run, no record.

One file daemon with a small ``--max-record-bytes`` so that a rebase too large for a record
can be provoked without megabytes of conversation: its conversation (three 9 KB tool
results, shorter than one message page) stays inline and is over the 20 KB limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import journald_client as jc
import pytest
from journald_client import errors

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

LIMIT = "20k"
WIDE = 9 * 1024


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the SHA-256 of its bytes (not the lock files, which
    name whoever held the run or the directory last, not what the run holds)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("daemon.lock", "journal.lock")
    }


def tool_turns(run: jc.Run, n: int, size: int, prefix: str = "t") -> None:
    for i in range(n):
        tid = f"{prefix}{i}"
        run.assistant(
            [{"type": "tool_use", "id": tid, "name": "read", "input": "{}"}], stop_reason="tool_use"
        )
        run.tool_result(tid, f"{i}" * size)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, jc.Client]]:
    tmp = tmp_path_factory.mktemp("refusals")
    with Daemon(tmp, "file", "--max-record-bytes", LIMIT) as d, jc.connect(str(d.socket)) as c:
        with c.start("small", FP, "hello") as run:
            tool_turns(run, 2, 10)
            run.assistant("done", stop_reason="end_turn")
        with c.start("wide", FP, "hello") as run:
            tool_turns(run, 4, WIDE)
            run.assistant("done", stop_reason="end_turn")
        with c.start("other", FP, "hello") as run:
            run.assistant("hi", stop_reason="end_turn")
        yield d, c


def refused(
    d: Daemon, call: Callable[[], object], error: type[errors.JournaldError] | None = None
) -> object:
    """Run ``call``; it must be refused (``error``, or a result saying so) and write nothing."""
    before = tree(d.data_dir)
    result: object = None
    if error is None:
        result = call()
    else:
        with pytest.raises(error):
            call()
    assert tree(d.data_dir) == before, "a refusal changed the data directory"
    return result


def test_refused_checkpoints_write_nothing(world: tuple[Daemon, jc.Client]) -> None:
    d, c = world
    refused(d, lambda: c.checkpoint("nobody"), errors.SessionNotFound)
    with c.resume("small", FP) as run:
        run.assistant(
            [{"type": "tool_use", "id": "open1", "name": "read", "input": "{}"}],
            stop_reason="tool_use",
        )
        refused(d, lambda: c.checkpoint("small"), errors.TurnRunning)
        run.tool_result("open1", "closed")


def test_refused_restores_leave_no_pre_restore_checkpoint(world: tuple[Daemon, jc.Client]) -> None:
    d, c = world
    small = c.checkpoint("small", label="small")
    wide = c.checkpoint("wide", label="wide")
    other = c.checkpoint("other", label="other")
    refused(d, lambda: c.restore("small", "not-a-ulid"), errors.InvalidCheckpointId)
    refused(d, lambda: c.restore("small", "01J" + "0" * 23), errors.CheckpointNotFound)
    refused(d, lambda: c.restore("small", other.checkpoint_id), errors.SessionMismatch)
    refused(d, lambda: c.restore("nobody", small.checkpoint_id), errors.SessionNotFound)
    # the rebase would be over --max-record-bytes: refused before the pre_restore checkpoint
    refused(d, lambda: c.restore("wide", wide.checkpoint_id), errors.InvalidRecord)
    with c.resume("small", FP) as run:
        refused(d, lambda: c.restore("small", small.checkpoint_id), errors.Locked)
        run.assistant(
            [{"type": "tool_use", "id": "open2", "name": "read", "input": "{}"}],
            stop_reason="tool_use",
        )
        refused(d, lambda: run.restore(small.checkpoint_id), errors.TurnRunning)
        run.tool_result("open2", "closed")
    assert [m.label for m in c.checkpoints("wide")] == ["wide"]


def test_refused_forks_leave_no_run_behind(world: tuple[Daemon, jc.Client]) -> None:
    d, c = world
    wide = c.checkpoint("wide", label="wide fork")
    runs = {r.run_id for r in c.list()}
    refused(d, lambda: c.fork("nobody"), errors.SessionNotFound)
    refused(d, lambda: c.fork("small", new_run_id="other"), errors.SessionExists)
    refused(d, lambda: c.fork("small", new_run_id="bad id!"), errors.InvalidId)
    refused(d, lambda: c.fork("small", checkpoint_id="01J" + "0" * 23), errors.CheckpointNotFound)
    # the fork's first rebase would be over --max-record-bytes: no run is created
    refused(d, lambda: c.fork("wide", new_run_id="wide-fork"), errors.InvalidRecord)
    refused(
        d,
        lambda: c.fork("wide", checkpoint_id=wide.checkpoint_id, new_run_id="wide-fork"),
        errors.InvalidRecord,
    )
    with c.resume("small", FP) as run:
        run.assistant(
            [{"type": "tool_use", "id": "open3", "name": "read", "input": "{}"}],
            stop_reason="tool_use",
        )
        refused(d, lambda: c.fork("small", new_run_id="mid-turn"), errors.TurnRunning)
        run.tool_result("open3", "closed")
    assert {r.run_id for r in c.list()} == runs


def test_refused_imports_write_nothing(world: tuple[Daemon, jc.Client]) -> None:
    d, c = world
    cp = c.checkpoint("small", label="to export")
    data = c.export_checkpoint("small", cp.checkpoint_id)
    refused(
        d, lambda: c.import_checkpoint("small", b"not an export"), errors.CheckpointImportInvalid
    )
    refused(
        d,
        lambda: c.import_checkpoint("small", data.replace(b"closed", b"cloSed", 1)),
        errors.CheckpointImportInvalid,
    )
    refused(d, lambda: c.import_checkpoint("nobody", data), errors.SessionNotFound)


def test_refused_and_failed_compactions_write_nothing(world: tuple[Daemon, jc.Client]) -> None:
    d, c = world
    result = refused(d, lambda: c.compact("other", "a summary", keep_last=10))
    assert getattr(result, "status", "") == "rejected"
    refused(d, lambda: c.compact("nobody", "a summary"), errors.SessionNotFound)
    refused(
        d, lambda: c.compact("small", [{"role": "assistant", "content": "x"}]), errors.InvalidRecord
    )
    # the kept tail is over --max-record-bytes: the compaction fails, and its pre_compaction
    # checkpoint is not left behind
    failed = refused(d, lambda: c.compact("wide", "summary of the reads", keep_last=6))
    assert getattr(failed, "status", "") == "failed"
    assert getattr(failed, "reason", "") == "invalid_record"
    with c.resume("small", FP) as run:
        run.assistant(
            [{"type": "tool_use", "id": "open4", "name": "read", "input": "{}"}],
            stop_reason="tool_use",
        )
        busy = refused(d, lambda: run.compact("summary", keep_last=1))
        assert getattr(busy, "reason", "") == "turn_running"
        run.tool_result("open4", "closed")
