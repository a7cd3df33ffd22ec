"""The CLI against a real daemon: every command runs as its own process (`python -m
journald.cli --socket …`) and reads through the daemon.

The replay renderings of the golden run ``tests/golden/cli_replay.jsonl`` (loaded into the
daemon by Open + Append) are compared with the checked-in files
``tests/integration/expected/cli_*.txt``. Nothing here ever writes those files: on a mismatch
the test fails with a unified diff and the command that produced the output; after a
reviewed change of behaviour, run that command and replace the file by hand.
"""

from __future__ import annotations

import difflib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.records import Record, canonical_json, decode
from journald.server.convert import record_to_pb
from tests.daemon import Daemon
from tests.integration.rpc import Lease, until_unlocked

HERE = Path(__file__).resolve().parents[1]  # tests/integration
EXPECTED = HERE / "expected"
GOLDEN = HERE.parent / "golden" / "cli_replay.jsonl"
RUN = "cli-replay"
WIDTH = "80"
CLI = [sys.executable, "-m", "journald.cli"]
NOT_FOUND, UNREACHABLE = 4, 5


def golden_records() -> list[Record]:
    return [decode(line) for line in GOLDEN.read_bytes().split(b"\n")[:-1]]


def load_into_daemon(target: str, recs: list[Record]) -> None:
    """Open the run as its meta says, Append every later record, release the lease."""
    meta = recs[0].payload
    with grpc.insecure_channel(target) as ch:
        stub = pbg.JournalServiceStub(ch)
        call = stub.Open(
            pb.OpenRequest(
                run_id=meta["run_id"],
                mode=pb.OPEN_MODE_CREATE,
                fingerprint=pb.Fingerprint(**meta["fingerprint"]),
                interactive=meta["interactive"],
                prompt_json=canonical_json(meta["prompt"]),
                created=meta["created"],
                client=pb.ClientInfo(name="golden-loader", pid=os.getpid(), host="test"),
            )
        )
        lease = next(iter(call)).lease
        resp = stub.Append(
            pb.AppendRequest(
                run_id=meta["run_id"],
                lease_id=lease.lease_id,
                records=[record_to_pb(r) for r in recs[1:]],
            )
        )
        assert [a.seq for a in resp.acks] == [r.seq for r in recs[1:]]
        call.cancel()


pytestmark = pytest.mark.shared_daemon("file")


@pytest.fixture(scope="module", autouse=True)
def _golden_runs_loaded(module_daemon: Daemon) -> None:
    load_into_daemon(module_daemon.target, golden_records())


def cli(
    d: Daemon | None, *args: str, socket: Path | None = None
) -> subprocess.CompletedProcess[str]:
    sock = socket if socket is not None else d.socket if d is not None else None
    env = {**os.environ, "COLUMNS": WIDTH}
    env.pop("JOURNALD_SOCKET", None)
    return subprocess.run(
        [*CLI, "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def assert_matches_expected(name: str, got: str, command: str) -> None:
    path = EXPECTED / name
    assert path.is_file(), (
        f"{path} is missing: review the output of `{command}` and check it in as that file"
    )
    want = path.read_text("utf-8")
    if got != want:
        diff = "".join(
            difflib.unified_diff(
                want.splitlines(keepends=True),
                got.splitlines(keepends=True),
                fromfile=f"expected/{name}",
                tofile=f"output of {command}",
            )
        )
        pytest.fail(f"`{command}` no longer prints {path.name}:\n{diff}", pytrace=False)


# --- ls, show ----------------------------------------------------------------------------


def test_ls_json_lists_the_golden_run_with_its_model_status_and_record_count(
    daemon: Daemon,
) -> None:
    res = cli(daemon, "ls", "--json")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)
    row = next(r for r in runs if r["run_id"] == RUN)
    assert row["model"] == "claude-test"
    assert row["status"] in ("open", "held")  # the loader's lease may still be closing
    assert row["records"] == 12
    assert row["last_seq"] == 12
    assert row["updated"] == "2026-11-30T12:00:00.000000Z"
    assert row["prompt_preview"] == "Tidy the build directory"


def test_ls_prints_a_plain_table_when_piped(daemon: Daemon) -> None:
    res = cli(daemon, "ls")
    assert res.returncode == 0, res.stderr
    header, *rows = res.stdout.splitlines()
    assert header.split() == ["RUN", "MODEL", "STATUS", "UPDATED", "RECORDS", "PROMPT"]
    assert any(r.startswith(RUN) and "Tidy the build" in r for r in rows), rows  # cut at 80
    assert "\x1b" not in res.stdout


def test_show_prints_status_model_iteration_counters_pending_and_prompt(daemon: Daemon) -> None:
    res = cli(daemon, "show", RUN)
    assert res.returncode == 0, res.stderr
    # status is "open" or "held" depending on how fast the loader's lease was released
    got = res.stdout.replace("status          held", "status          open")
    assert_matches_expected("cli_show.txt", got, f"journald show {RUN}")


# --- replay ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("cli_replay_narrate.txt", ("--mode", "narrate")),
        ("cli_replay_dump.txt", ("--mode", "dump")),
        ("cli_replay_dump_no_output.txt", ("--mode", "dump", "--no-output")),
        ("cli_replay_transcript.txt", ("--mode", "transcript")),
    ],
)
def test_replay_renders_the_golden_run_exactly_as_checked_in(
    daemon: Daemon, name: str, args: tuple[str, ...]
) -> None:
    res = cli(daemon, "replay", RUN, "--width", WIDTH, *args)
    assert res.returncode == 0, res.stderr
    assert_matches_expected(
        name, res.stdout, f"journald replay {RUN} --width {WIDTH} {' '.join(args)}"
    )


def test_replay_json_gives_the_viewer_model_with_calls_paired_to_results(daemon: Daemon) -> None:
    res = cli(daemon, "replay", RUN, "--json")
    assert res.returncode == 0, res.stderr
    lines = json.loads(res.stdout)
    pairs = [(x["kind"], x["tool_use_id"]) for x in lines if x["kind"] in ("call", "result")]
    assert pairs == [
        ("call", "t1"),
        ("result", "t1"),
        ("call", "t2"),
        ("result", "t2"),
        ("call", "t3"),
        ("result", "t3"),
        ("call", "t4"),
        ("call", "t5"),
        ("result", "t5"),
    ]


# --- tail -f, rm, verify ---------------------------------------------------------------------


def _reader(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def test_tail_follow_prints_records_appended_after_it_started_and_exits_on_delete(
    daemon: Daemon,
) -> None:
    run = "cli-tail"
    with grpc.insecure_channel(daemon.target) as ch:
        writer = Lease(pbg.JournalServiceStub(ch), run, mode=pb.OPEN_MODE_CREATE, prompt="tail me")
        writer.append(writer.assistant("t1"))  # seq 2: before the tail starts
        env = {**os.environ, "COLUMNS": WIDTH}
        proc = subprocess.Popen(
            [*CLI, "--socket", str(daemon.socket), "tail", "-f", run],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            out: queue.Queue[str] = queue.Queue()
            err: queue.Queue[str] = queue.Queue()
            threading.Thread(target=_reader, args=(proc.stdout, out), daemon=True).start()
            threading.Thread(target=_reader, args=(proc.stderr, err), daemon=True).start()
            started = err.get(timeout=30)
            while "following" not in started:  # skip anything else the process logs first
                started = err.get(timeout=30)
            assert "following run cli-tail from seq 3" in started
            writer.append(writer.result("t1", out="\x1b[31mred\x1b[0m output"))  # seq 3
            writer.append(writer.terminal("completed"))  # seq 4
            first, second = out.get(timeout=30), out.get(timeout=30)
            assert first.split()[0] == "3"
            assert "tool_result" in first
            assert "<- [t1] red output" in first
            assert second.split()[0] == "4"
            assert "terminal" in second
            assert "completed" in second
            writer.close()
            stub = pbg.JournalServiceStub(ch)
            until_unlocked(lambda: stub.Delete(pb.DeleteRequest(run_id=run)))
            assert proc.wait(timeout=30) == 0
            assert "run cli-tail was deleted" in "".join(err.queue)
            assert out.empty()  # seq 2 (older than the tail) was never printed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_verify_reports_an_intact_chain(daemon: Daemon) -> None:
    res = cli(daemon, "verify", RUN)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"ok: run {RUN}: 12 records")


def test_rm_deletes_a_run_and_a_second_rm_is_not_found_unless_forced(daemon: Daemon) -> None:
    with grpc.insecure_channel(daemon.target) as ch:
        Lease(pbg.JournalServiceStub(ch), "cli-rm", mode=pb.OPEN_MODE_CREATE).close()
    res = until_unlocked_cli(daemon, "rm", "cli-rm")
    assert res.returncode == 0, res.stderr
    assert cli(daemon, "rm", "cli-rm").returncode == NOT_FOUND
    assert cli(daemon, "rm", "-f", "cli-rm").returncode == 0
    assert cli(daemon, "show", "cli-rm").returncode == NOT_FOUND


def until_unlocked_cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI call, retried (bounded) while the run's just-closed lease is still held."""
    for _ in range(50):
        res = cli(d, *args)
        if "locked" not in res.stderr:
            return res
    return res


# --- exit codes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("show", "no-such-run"),
        ("replay", "no-such-run"),
        ("tail", "-f", "no-such-run"),
        ("verify", "no-such-run"),
    ],
)
def test_a_missing_run_exits_with_the_not_found_code(
    daemon: Daemon, command: tuple[str, ...]
) -> None:
    res = cli(daemon, *command)
    assert res.returncode == NOT_FOUND, res.stderr
    assert "no-such-run" in res.stderr


def test_no_daemon_exits_with_the_unreachable_code_and_says_how_to_start_one(
    tmp_path: Path,
) -> None:
    res = cli(None, "ls", socket=tmp_path / "nobody.sock")
    assert res.returncode == UNREACHABLE
    assert "cannot reach the journald daemon" in res.stderr
    assert f"start it with `journald serve --socket {tmp_path / 'nobody.sock'}`" in res.stderr
    assert res.stdout == ""
