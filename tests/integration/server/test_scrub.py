"""Damage behind a run's fold snapshot is never served (docs/design.md#scrubbing).

Closed 9-record runs in segments of 4 (sealed 1-4 and 5-8, seq 9 active; the lease end left a
fold snapshot at seq 9, so an Open reads none of the sealed segments), each damaged in one
way, next to a healthy run, served by real daemons:

* what a stat sees (a sealed segment written to, deleted, cut; a manifest that does not
  parse) is refused by the next Open and Fold with the structural check alone;
* the background scrubber finds every damage, including what no stat sees (a byte rotted in
  place, a manifest entry altered), in its first pass: List shows the run ``corrupted``, Open
  and Fold refuse it, also after a restart, before any pass; the healthy run is never flagged;
* ``journald recover`` (what the refusal says to do) lets the run open again;
* ``journald verify --all`` names the damaged runs and exits 1, 0 once they are gone;
* on the memory and JetStream backends a pass verifies every run and flags none that is
  healthy (their runs cannot be damaged from outside the daemon here).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.errors import StoreCorrupted
from journald.server.scrub import Finding
from journald.server.service import JournalService
from journald.storage.file.checkpoint_store import FileCheckpointStore
from journald.storage.file.store import FileStore
from tests.builders import TS, JournalBuilder, user_payload
from tests.daemon import Daemon
from tests.damage import alter_manifest_entry
from tests.integration.rpc import Lease, error_of, stub
from tests.integration.server.test_damaged_runs import cli
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until

SEGMENT = ("--segment-max-records", "4")
NO_SCRUB = ("--scrub-interval-s", "0")
FAST_SCRUB = ("--scrub-interval-s", "2", "--scrub-bytes-per-s", "64m")
HEALTHY = "healthy"


def seg(run: Path, n: int) -> Path:
    return run / "segments" / f"{n:06d}.jsonl"


def flip_seq(path: Path, line: int, keep_mtime: bool) -> None:
    """Flip one bit inside the record of ``line`` (0-based) of a sealed segment; with
    ``keep_mtime`` the file's times are put back, as when a bit rots on the disk."""
    st = path.stat()
    raw = bytearray(path.read_bytes())
    at = sum(len(x) + 1 for x in bytes(raw).split(b"\n")[:line]) + 30
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def cut_last_line(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: raw.rfind(b"\n", 0, len(raw) - 1) + 1])


def garble_manifest(run: Path) -> None:
    (run / "manifest.json").write_bytes(b'{"form')


# run id -> (the damage, whether a stat of the files sees it)
DAMAGE: dict[str, tuple[Callable[[Path], None], bool]] = {
    "flipped": (lambda run: flip_seq(seg(run, 1), 2, keep_mtime=False), True),
    "rotted": (lambda run: flip_seq(seg(run, 1), 2, keep_mtime=True), False),
    "deleted": (lambda run: seg(run, 2).unlink(), True),
    "truncated": (lambda run: cut_last_line(seg(run, 1)), True),
    "manifest-garbled": (garble_manifest, True),
    "manifest-altered": (alter_manifest_entry, False),
}


def write_run(s: object, run_id: str) -> None:
    """A run of 9 records (meta, then assistant/user turns), its lease released."""
    lease = Lease(s, run_id)  # type: ignore[arg-type]
    for i in range(8):
        if i % 2 == 0:
            lease.append(lease.assistant(stop="end_turn"))
        else:
            user = pb.UserPayload(content_json=b'[{"type":"text","text":"go on"}]')
            lease.append(pb.Record(seq=lease.next_seq(), ts=TS, user=user))
    assert lease.seq == 9
    lease.release()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The damaged runs and the healthy one, written once per module."""
    tmp = tmp_path_factory.mktemp("scrub")
    data = tmp / "data"
    with Daemon(tmp, "file", *SEGMENT, *NO_SCRUB, data_dir=data) as d:
        s = stub(d.target)
        for run_id in [HEALTHY, *DAMAGE]:
            write_run(s, run_id)
    for run_id, (damage, _) in DAMAGE.items():
        damage(data / "sessions" / run_id)
    return data


@pytest.fixture
def damaged_data(pristine: Path, tmp_path: Path) -> Path:
    """This test's copy (file times kept: a rotted byte stays invisible to a stat)."""
    return Path(shutil.copytree(pristine, tmp_path / "data", copy_function=shutil.copy2))


def refusal(call: Callable[[], object]) -> pb.ErrorDetail:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return error_of(info.value)


def open_lease(s: object, run_id: str) -> Callable[[], object]:
    return lambda: Lease(s, run_id, mode=pb.OPEN_MODE_RESUME)  # type: ignore[arg-type]


def fold(s: object, run_id: str) -> Callable[[], object]:
    return lambda: s.Fold(pb.FoldRequest(run_id=run_id))  # type: ignore[attr-defined]


def statuses(s: object) -> dict[str, tuple[str, str]]:
    rows = s.List(pb.ListRequest()).runs  # type: ignore[attr-defined]
    return {r.run_id: (r.status, r.error) for r in rows}


def test_open_and_fold_refuse_what_a_stat_of_the_sealed_segments_sees_without_a_scrub(
    damaged_data: Path, tmp_path: Path
) -> None:
    with Daemon(tmp_path, "file", *SEGMENT, *NO_SCRUB, data_dir=damaged_data) as d:
        s = stub(d.target)
        for run_id, (_, seen) in DAMAGE.items():
            if not seen:
                continue
            for name, call in (("Open", open_lease(s, run_id)), ("Fold", fold(s, run_id))):
                err = refusal(call)
                where = f"{name} of {run_id}: {err.code}: {err.message}"
                assert err.code == "store_corrupted", where
                assert err.metadata["run_id"] == run_id, where
                assert f"run {run_id}:" in err.message, where
                assert "journald recover" in err.message or "backup" in err.message, where
            assert statuses(s)[run_id][0] == "corrupted", run_id
        assert Lease(s, HEALTHY, mode=pb.OPEN_MODE_RESUME).lease.last_seq == 9


def test_one_scrub_pass_shows_every_damaged_run_as_corrupted_and_open_refuses_it(
    damaged_data: Path, tmp_path: Path
) -> None:
    env = {"JOURNALD_LOG_LEVEL": "INFO"}
    with Daemon(tmp_path, "file", *SEGMENT, *FAST_SCRUB, data_dir=damaged_data, env=env) as d:
        s = stub(d.target)
        first = re.compile(r"scrub: pass 1 verified (\d+) runs .*; (\d+) damaged")
        found = wait_until(lambda: first.search(d.log()), what="the first scrub pass to end")
        assert found is not None
        assert found.groups() == (str(len(DAMAGE) + 1), str(len(DAMAGE))), d.log()
        assert {r: st[0] for r, st in statuses(s).items()} == {
            HEALTHY: "open",
            **dict.fromkeys(DAMAGE, "corrupted"),
        }
        rows = statuses(s)
        assert rows[HEALTHY] == ("open", "")
        for run_id in DAMAGE:
            assert f"run {run_id}:" in rows[run_id][1], rows[run_id]
            for name, call in (("Open", open_lease(s, run_id)), ("Fold", fold(s, run_id))):
                err = refusal(call)
                assert (name, run_id, err.code) == (name, run_id, "store_corrupted"), err.message
                assert err.metadata["run_id"] == run_id
        # what only the scrubber sees names it, the segment and what to do
        err = refusal(open_lease(s, "rotted"))
        assert err.metadata["found_by"] == "scrub", err.message
        assert err.metadata["file"].endswith("000001.jsonl"), err.message
        assert err.metadata["seq"] == "3", err.message
        assert "journald recover rotted" in err.message
        assert Lease(s, HEALTHY, mode=pb.OPEN_MODE_RESUME).lease.last_seq == 9
    # kept beside the run: after a restart, refused before any pass
    (tmp_path / "restart").mkdir()
    with Daemon(tmp_path / "restart", "file", *SEGMENT, data_dir=damaged_data, env=env) as d:
        s = stub(d.target)
        err = refusal(open_lease(s, "rotted"))
        assert (err.code, err.metadata["found_by"]) == ("store_corrupted", "scrub")
        assert refusal(fold(s, "manifest-altered")).code == "store_corrupted"
        wait_until(
            lambda: statuses(s)["rotted"][0] == "corrupted",
            what="List to show the finding kept from before the restart",
        )
        assert "scrub: pass" not in d.log()
        # what the refusal says to do: the recovery moves the rotted record out, and the run
        # opens again (warning about the hole), also for the scrubber's next pass
        recovered = cli(d, "recover", "rotted")
        assert recovered.returncode == 0, recovered.stdout + recovered.stderr
        lease = Lease(s, "rotted", mode=pb.OPEN_MODE_RESUME)
        assert "records_quarantined" in {w.code for w in lease.lease.warnings}
        assert statuses(s)["rotted"][0] != "corrupted"


def test_verify_all_names_every_damaged_run_and_exits_1_then_0_once_they_are_gone(
    damaged_data: Path, tmp_path: Path
) -> None:
    with Daemon(tmp_path, "file", *SEGMENT, *NO_SCRUB, data_dir=damaged_data) as d:
        res = cli(d, "verify", "--all")
        assert res.returncode == 1, res.stdout + res.stderr
        for run_id in DAMAGE:
            assert f"damaged: run {run_id}: " in res.stdout, res.stdout
        assert "damaged: run healthy" not in res.stdout
        assert f"{len(DAMAGE) + 1} runs verified" in res.stdout
        as_json = json.loads(cli(d, "verify", "--all", "--json").stdout)
        assert as_json["damaged"] == len(DAMAGE)
        assert {r["run_id"] for r in as_json["runs"] if r["ok"]} == {HEALTHY}
        for run_id in DAMAGE:
            assert cli(d, "rm", run_id).returncode == 0
        res = cli(d, "verify", "--all")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "1 run verified (9 records): every hash chain intact" in res.stdout
        assert cli(d, "verify").returncode == 2


@pytest.mark.parametrize(
    "backend", ["memory", pytest.param("jetstream", marks=pytest.mark.jetstream)]
)
def test_on_the_memory_and_jetstream_backends_a_pass_verifies_every_run_and_flags_none(
    tmp_path: Path, backend: str
) -> None:
    env = {"JOURNALD_LOG_LEVEL": "INFO"}
    flags: list[str] = ["--scrub-interval-s", "0.2", "--scrub-bytes-per-s", "64m"]
    sock = None
    if backend == "jetstream":
        url, stream, _ = asyncio.run(fresh_stream())
        flags += ["--nats-url", url, "--stream", stream]
        sock = Path(f"/tmp/jd-scrub-{os.getpid()}-{stream}/s")
    with Daemon(tmp_path, backend, *flags, env=env, socket=sock) as d:
        s = stub(d.target)
        write_run(s, HEALTHY)
        held = Lease(s, "held")
        again = re.compile(r"scrub: pass \d+ verified 2 runs .*; 0 damaged")
        wait_until(lambda: again.search(d.log()), what="a pass over both runs")
        assert statuses(s) == {HEALTHY: ("open", ""), "held": ("held", "")}
        assert held.append(held.assistant(stop="end_turn")).acks[0].seq == 2
        assert Lease(s, HEALTHY, mode=pb.OPEN_MODE_RESUME).lease.last_seq == 9


async def test_a_dormant_state_kept_from_before_a_finding_is_not_served_after_it(
    tmp_path: Path,
) -> None:
    """In process: a Fold before the scrubber's finding keeps the run's folded state; the
    next Fold after the finding refuses instead of serving it."""
    store = FileStore(tmp_path / "data", segment_max_records=4)
    checkpoints = FileCheckpointStore.colocated_with(store.sessions_dir)
    try:
        service = JournalService(store, checkpoints=checkpoints)
        runs = service.runs
        b = JournalBuilder("kept")
        for i in range(4):
            b.add("user", user_payload(f"message {i}"))
        journal = await store.create(b.records[0])
        await journal.append(b.records[1:])
        await journal.close()
        assert (await runs.state_of("kept")).last_seq == 5
        key = await runs.scrubs.key_of("kept")
        meta = {"file": "segments/000001.jsonl", "seq": "3"}
        await runs.scrubs.found("kept", Finding("kept", TS, "run kept: damaged", meta, key))
        with pytest.raises(StoreCorrupted) as refused:
            await runs.state_of("kept")
        assert refused.value.metadata["found_by"] == "scrub"
        await runs.scrubs.found("kept", None)  # a pass that finds it healthy again
        assert (await runs.state_of("kept")).last_seq == 5
    finally:
        await store.close()
