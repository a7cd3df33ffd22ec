"""Real crashes (SIGKILL) of a FileStore writer at every named failpoint and at random moments.

The writer (``tests/faults/file_writer.py``) prints a seq only after its append returned.
After each kill a fresh store must: open the run for append (repairing any torn tail), hold
every acknowledged record byte for byte, load, verify, and accept the next seq.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from journald.storage.file.segments import JOURNAL
from journald.storage.file.store import FileStore
from tests.faults.file_workload import expected
from tests.storage.file.test_aio_sync import aio_works

ROOT = Path(__file__).resolve().parents[3]
RUN = "crash-run"
COUNT = 40
pytestmark = pytest.mark.slow


def start_writer(
    data: Path, failpoints: str = "", prune_at: int = 0, aio: str = ""
) -> subprocess.Popen[str]:
    env = dict(os.environ, JOURNALD_FAILPOINTS=failpoints, PYTHONPATH=str(ROOT))
    if aio:
        env["JOURNALD_AIO_SYNC"] = aio
    cmd = [sys.executable, "-m", "tests.faults.file_writer", str(data), RUN, str(COUNT)]
    if prune_at:
        cmd += ["--prune-at", str(prune_at)]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def collect(proc: subprocess.Popen[str], kill_after: int = 0) -> tuple[dict[int, str], int]:
    """Read acks until the writer exits (or SIGKILL it by pid after ``kill_after`` acks)."""
    acks: dict[int, str] = {}
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            parts = line.split()
            if parts and parts[0] == "ack":
                acks[int(parts[1])] = parts[2]
                if kill_after and len(acks) >= kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return acks, rc


async def check_after_crash(data: Path, acks: dict[int, str]) -> None:
    want = expected(RUN, COUNT + 5)
    store = FileStore(data, segment_max_records=5)
    try:
        journal = await store.open(RUN)
        loaded = {r.seq: r for r in await store.load(RUN)}
        for seq, digest in acks.items():
            if seq in loaded:  # a prune may legitimately drop acknowledged seqs before a rebase
                assert loaded[seq].hash == digest
                assert loaded[seq].raw == want[seq - 1].raw
            else:
                assert 1 < seq < max(r.seq for r in loaded.values() if r.kind == "rebase")
        for rec in loaded.values():
            assert rec.raw == want[rec.seq - 1].raw
        assert journal.last_seq >= max(acks)
        report = await store.verify(RUN)
        assert report.last_seq == journal.last_seq
        nxt = journal.last_seq + 1
        [res] = await journal.append([want[nxt - 1]])
        assert (res.seq, res.duplicate) == (nxt, False)
        await journal.close()
        assert (await store.verify(RUN)).last_seq == nxt
        raw = (data / "sessions" / RUN / JOURNAL).read_bytes()
        assert raw == b"" or raw.endswith(b"\n")
    finally:
        await store.close()


KILL_POINTS = [
    ("before_write", 6, 0),
    ("after_write_before_fsync", 6, 0),
    ("after_fsync_before_advance", 6, 0),
    ("mid_seal", 2, 0),
    ("after_seal_manifest", 2, 0),
    ("mid_manifest_write", 3, 0),
    ("mid_prune_stage", 1, 22),
    ("mid_prune_rename", 1, 22),
    ("after_prune_rename", 1, 22),
]


@pytest.mark.parametrize(("point", "nth", "prune_at"), KILL_POINTS, ids=[p[0] for p in KILL_POINTS])
async def test_every_acknowledged_record_survives_a_kill_at_the_failpoint(
    tmp_path: Path, point: str, nth: int, prune_at: int
) -> None:
    data = tmp_path / "data"
    acks, rc = collect(start_writer(data, f"{point}=kill@{nth}", prune_at))
    assert rc == -signal.SIGKILL, f"the writer was not killed at {point}"
    assert acks, "the writer acknowledged nothing before the kill"
    await check_after_crash(data, acks)
    # a second writer continues the same run to the end
    acks2, rc2 = collect(start_writer(data))
    assert rc2 == 0
    await check_after_crash(data, {**acks, **acks2})


WRITE_POINTS = [(p, aio) for p in KILL_POINTS[:3] for aio in ("on", "off")]


@pytest.mark.parametrize(
    ("point", "aio"), WRITE_POINTS, ids=[f"{p[0]}-aio-{aio}" for p, aio in WRITE_POINTS]
)
async def test_a_kill_in_a_group_write_loses_no_acknowledged_record_on_either_sync_path(
    tmp_path: Path, point: tuple[str, int, int], aio: str
) -> None:
    # the fdatasync through AIO from the loop (on) and through a writer thread (off): the
    # same steps, so a kill at each one leaves the same promise kept
    if aio == "on" and not aio_works():
        pytest.skip("Linux native AIO fdatasync is unavailable here: only the threads' path")
    name, nth, _ = point
    data = tmp_path / "data"
    acks, rc = collect(start_writer(data, f"{name}=kill@{nth}", aio=aio))
    assert rc == -signal.SIGKILL, f"the writer was not killed at {name}"
    assert acks, "the writer acknowledged nothing before the kill"
    await check_after_crash(data, acks)
    acks2, rc2 = collect(start_writer(data, aio=aio))
    assert rc2 == 0
    await check_after_crash(data, {**acks, **acks2})


async def test_a_kill_while_repairing_a_torn_tail_repairs_on_the_next_open(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    acks, rc = collect(start_writer(data))
    assert rc == 0
    journal = data / "sessions" / RUN / JOURNAL
    with journal.open("ab") as f:
        f.write(b'{"v":1,"seq":')
    _, rc = collect(start_writer(data, "mid_repair=kill@1"))
    assert rc == -signal.SIGKILL
    assert (data / "sessions" / RUN / "journal.jsonl.broken").exists()
    await check_after_crash(data, acks)
    assert (data / "sessions" / RUN / "journal.jsonl.broken.1").exists()


@pytest.mark.parametrize("seed", range(10))
async def test_every_acknowledged_record_survives_a_kill_at_a_random_moment(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    data = tmp_path / "data"
    acks, rc = collect(
        start_writer(data, prune_at=rng.choice([0, 22])), kill_after=rng.randint(1, COUNT - 2)
    )
    assert rc in (0, -signal.SIGKILL)
    await check_after_crash(data, acks)
