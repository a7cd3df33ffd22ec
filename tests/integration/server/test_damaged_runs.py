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

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.records import Record
from journald.storage.file.segments import JOURNAL, META_CACHE
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder, assistant_payload, text, user_payload
from tests.daemon import Daemon
from tests.integration.rpc import Lease, error_of, stub

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
    # what journalctl shows: each damage once at ERROR, however often it was read
    logged = [ln for ln in d.log().splitlines() if " ERROR journald." in ln]
    assert len([ln for ln in logged if "store_corrupted: run bad," in ln]) == 1, logged
    assert any("run bad, file " in ln and "line 5, seq 5" in ln for ln in logged)
    assert any("run bad-inside, file " in ln and "line 2, seq 2" in ln for ln in logged)


def damaged_runs(data: Path) -> dict[str, tuple[str, int]]:
    """Runs damaged where a decode of stored bytes fails, by run: (file, seq) to be named.

    ``legacy-key``: written as versions without line checksums did, its last record's
    ``message`` key changed by one bit (still canonical JSON: only the schema can tell);
    ``framed-key``: the same change in a current run (its checksum tells); ``meta-sealed``: a
    segmented run whose meta record (seq 1, in a sealed segment) no longer parses."""
    runs = {}
    for rid in ("legacy-key", "framed-key"):
        b = JournalBuilder(rid, prompt=f"prompt of {rid}")
        b.add("user", user_payload("go"))
        b.add("assistant", assistant_payload([text("done")], 1))
        runs[rid] = b.records
    runs["meta-sealed"] = run_records("meta-sealed", turns=3)
    write_runs(data, {"framed-key": runs["framed-key"]})
    write_runs(data, {"meta-sealed": runs["meta-sealed"]}, segment_max_records=3)
    legacy = data / "sessions" / "legacy-key"
    legacy.mkdir(mode=0o700)
    (legacy / JOURNAL).write_bytes(b"".join(r.raw + b"\n" for r in runs["legacy-key"]))
    for rid in ("legacy-key", "framed-key"):
        path = data / "sessions" / rid / JOURNAL
        raw = path.read_bytes()
        at = raw.rfind(b'"message":') + len('"messag')
        path.write_bytes(raw[:at] + b"d" + raw[at + 1 :])  # "message" -> "messagd"
    seg = data / "sessions" / "meta-sealed" / "segments" / "000001.jsonl"
    seg.write_bytes(b"z" + seg.read_bytes()[1:])  # the meta line's "{" -> "z"
    # sealed segments are immutable, so the listing cache never re-reads them: drop it
    (seg.parent.parent / META_CACHE).unlink()
    return {
        "legacy-key": (JOURNAL, 3),
        "framed-key": (JOURNAL, 3),
        "meta-sealed": ("000001.jsonl", 1),
    }


def test_every_read_of_a_damaged_record_is_store_corrupted_naming_run_file_and_seq(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    damaged = damaged_runs(data)
    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d.target)
        for rid, (file, seq) in damaged.items():
            reads = {
                "Load": lambda rid=rid: list(s.Load(pb.LoadRequest(run_id=rid))),
                "Fold": lambda rid=rid: s.Fold(pb.FoldRequest(run_id=rid)),
                "Verify": lambda rid=rid: s.Verify(pb.VerifyRequest(run_id=rid)),
                "History": lambda rid=rid: s.History(pb.HistoryRequest(run_id=rid, limit=5)),
                "Open": lambda rid=rid: Lease(s, rid, mode=pb.OPEN_MODE_RESUME),
            }
            for name, read in reads.items():
                with pytest.raises(grpc.RpcError) as info:
                    read()
                err = error_of(info.value)
                where = f"{name} of {rid}: {err.code}: {err.message}"
                assert err.code == "store_corrupted", where
                assert err.metadata["run_id"] == rid, where
                assert err.metadata["file"].endswith(file), where
                assert err.metadata["seq"] == str(seq), where
                assert f"run {rid}:" in err.message, where
        rows = {r.run_id: r for r in s.List(pb.ListRequest()).runs}
        assert {rid: rows[rid].status for rid in damaged} == dict.fromkeys(damaged, "corrupted")


def test_recover_quarantines_the_damage_records_the_hole_and_open_warns_about_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    runs = {rid: run_records(rid) for rid in ("bad", "held", "fine")}
    write_runs(data, runs)
    flip(data, "bad", line=-1)  # the last record (seq 5): an acknowledged one
    before = (data / "sessions" / "bad" / JOURNAL).read_bytes()
    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d.target)
        holder = Lease(s, "held", name="busy-agent", pid=777)
        refused = cli(d, "recover", "held")  # a writer holds it: the daemon will not take it
        assert refused.returncode == 1
        assert refused.stderr.startswith("journald: locked: run held is held by busy-agent")
        holder.close()
        assert cli(d, "recover", "fine").stdout.startswith("run fine: nothing to recover")

        res = cli(d, "recover", "bad")
        assert res.returncode == 0, res.stderr
        out = res.stdout
        qdir = data / "quarantine"
        [moved] = list(qdir.iterdir())
        assert f"run bad: moved 1 damaged record to {moved}" in out
        assert f"seq 5: {data / 'sessions' / 'bad' / JOURNAL} line 5" in out
        # the reason is whole (it was cut at the first '.' of the file path)
        assert "the line's checksum does not match its record bytes (they changed on disk)" in out
        assert "the hole (seq 5) is recorded in the run as rebase seq 6" in out
        [evidence] = list(moved.iterdir())
        last_line = before[before.rfind(b"\n", 0, len(before) - 1) + 1 :]
        assert evidence.read_bytes() + b"\n" == last_line
        assert "journald.storage.file: run bad: quarantined" in d.log()

        assert cli(d, "verify", "bad").returncode == 0
        rows = {r["run_id"]: r for r in json.loads(cli(d, "ls", "--json").stdout)}
        assert (rows["bad"]["status"], rows["bad"]["last_seq"]) == ("open", 6)
        shown = cli(d, "show", "bad").stdout
        assert "anomaly" in shown
        assert "records_quarantined" in shown

        lease = Lease(s, "bad", mode=pb.OPEN_MODE_RESUME)
        warned = {w.code: w.message for w in lease.lease.warnings}
        assert "seq 5" in warned["records_quarantined"]
        assert lease.lease.last_seq == 6
        texts = [json.loads(m.content_json)[0]["text"] for m in lease.lease.state.messages]
        assert texts == ["prompt of bad", "bad answer 0", "bad follow-up 0", "bad answer 1"]
        [ack] = lease.append(lease.assistant()).acks  # the run goes on after the hole
        assert ack.seq == 7
        lease.close()
        again = cli(d, "recover", "bad", "--json")
        assert json.loads(again.stdout)["rebase_seq"] == 0  # nothing left to recover


def test_recover_on_a_backend_without_recovery_is_refused_as_unsupported(tmp_path: Path) -> None:
    with Daemon(tmp_path, "memory") as d:
        lease = Lease(stub(d.target), "mem")
        lease.close()
        res = cli(d, "recover", "mem")
        assert res.returncode == 1
        assert res.stderr.startswith("journald: unsupported: run mem: the memory backend keeps")


def test_damage_in_the_middle_of_a_large_active_segment_a_read_met_lists_the_run_corrupted(
    tmp_path: Path,
) -> None:
    """The listing reads the ends of a large active segment (docs/design.md#recovery): damage
    in its middle is listed once a read met it (here a Fold from seq 1), for as long as the
    files stay as they were."""
    data = tmp_path / "data"
    recs = run_records("long-bad", turns=600)  # ~1,200 records, an active segment over 64 KiB
    write_runs(data, {"long-bad": recs})
    flip(data, "long-bad", line=600)
    (data / "sessions" / "long-bad" / META_CACHE).unlink()
    with Daemon(tmp_path, "file", data_dir=data) as d:
        s = stub(d.target)
        with pytest.raises(grpc.RpcError) as folded:
            s.Fold(pb.FoldRequest(run_id="long-bad", omit_messages=True))
        assert error_of(folded.value).code == "store_corrupted"
        [row] = [r for r in s.List(pb.ListRequest()).runs if r.run_id == "long-bad"]
        assert row.status == "corrupted"
        assert f"{JOURNAL} line 601 (seq 601)" in row.error
        with pytest.raises(grpc.RpcError) as paged:
            s.History(pb.HistoryRequest(run_id="long-bad", view=pb.HISTORY_VIEW_STATE, limit=5))
        assert error_of(paged.value).code == "store_corrupted"
