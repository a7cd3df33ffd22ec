"""A real daemon over a data directory holding damaged runs: the damage is reported precisely
(``store_corrupted`` naming run, file and seq), logged, never fatal to the other runs, and
reads write nothing.

The runs are written with the file store itself (fast), damaged on disk, then served.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from journald_client.pb import journal_pb2 as pb

from journald.records import Record
from journald.storage.file import FileStore
from journald.storage.segments import JOURNAL, META_CACHE
from tests.builders import JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import stub

CLI = [sys.executable, "-m", "journald.cli"]


def run_records(run_id: str, turns: int = 2) -> list[Record]:
    b = JournalBuilder(run_id, prompt=f"prompt of {run_id}")
    for i in range(turns):
        b.add("assistant", assistant_payload([text(f"{run_id} answer {i}")], i + 1))
        b.add("user", user_payload(f"{run_id} follow-up {i}"))
    return b.records


def write_runs(data: Path, runs: dict[str, list[Record]], **kw: int) -> None:
    async def go() -> None:
        store = FileStore(data, **kw)  # type: ignore[arg-type]
        for recs in runs.values():
            journal = await store.create(recs[0])
            await journal.append(recs[1:])
            await journal.close()
        await store.close()

    asyncio.run(go())


def flip(data: Path, run_id: str, line: int = -1, offset: int = 20) -> None:
    """Flip one bit of a stored line (``line`` as a list index: -1 is the last)."""
    path = data / "sessions" / run_id / JOURNAL
    raw = path.read_bytes()
    lines = raw.split(b"\n")[:-1]
    start = sum(len(ln) + 1 for ln in lines[: line % len(lines)])
    changed = bytearray(raw)
    changed[start + offset] ^= 0x01
    path.write_bytes(bytes(changed))


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("JOURNALD_SOCKET", None)
    return subprocess.run(
        [*CLI, "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Daemon, dict[str, list[Record]]]]:
    """Runs ``good-1``, ``good-2``, ``bad`` (a flipped byte in its last record) and
    ``bad-inside`` (one in its second record, and no listing cache: it is listed afresh)."""
    data = tmp_path / "data"
    runs = {rid: run_records(rid) for rid in ("good-1", "bad", "good-2", "bad-inside")}
    write_runs(data, runs)
    flip(data, "bad")
    flip(data, "bad-inside", line=1)
    (data / "sessions" / "bad-inside" / META_CACHE).unlink()
    d = Daemon(tmp_path, "file", data_dir=data).start()
    try:
        yield d, runs
    finally:
        d.stop()


def test_a_damaged_run_is_listed_as_corrupted_and_the_others_stay_listable(
    served: tuple[Daemon, dict[str, list[Record]]],
) -> None:
    d, runs = served
    res = cli(d, "ls", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["run_id"]: r for r in json.loads(res.stdout)}
    assert set(rows) == set(runs)
    bad = rows["bad"]
    assert bad["status"] == "corrupted"
    assert "journal.jsonl line 5 (seq 5)" in bad["error"]
    assert rows["bad-inside"]["status"] == "corrupted"
    assert "journal.jsonl line 2 (seq 2)" in rows["bad-inside"]["error"]
    for rid in ("good-1", "good-2"):
        assert (rows[rid]["status"], rows[rid]["records"], rows[rid]["error"]) == ("open", 5, "")
    table = cli(d, "ls")
    assert table.returncode == 0, table.stderr
    [line] = [ln for ln in table.stdout.splitlines() if ln.startswith("bad ")]
    assert "corrupted" in line
    assert "line 5 (seq 5)" in line
    shown = cli(d, "show", "good-1")
    assert shown.returncode == 0, shown.stderr
    assert "prompt of good-1" in shown.stdout
    refused = cli(d, "show", "bad")
    assert refused.returncode == 1
    assert "store_corrupted: run bad:" in refused.stderr
    over_rpc = stub(d.target).List(pb.ListRequest())
    assert {r.run_id: r.status for r in over_rpc.runs}["bad"] == "corrupted"
