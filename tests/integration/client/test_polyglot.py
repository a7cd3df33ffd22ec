"""One run, three languages, one real daemon.

A Go agent (clients/go/examples/agent) starts a run and journals an assistant turn with two
tool calls and the first call's result, then is killed with SIGKILL without closing. A
TypeScript agent (clients/ts/examples/agent.ts) resumes the run, sees exactly the one
unanswered call, completes it, journals the final answer and the terminal record. Python
folds the run through the generated stubs and compares the state with a checked-in
expectation, then verifies the hash chain with `journald verify` (the CLI) and the Verify
RPC. Both agents stamp records with a fixed clock, so the journal, and with it
every hash, is byte-identical on every run: the expected state pins the cross-language
encoding end to end.

The Go and TypeScript programs are built from source here (go build, tsc), so `go` and
`clients/ts/node_modules` (scripts/setup_clients.sh) are needed; without them the tests
skip, except under CI=true, where they fail.

Refresh the expectation after an intended record-format change with
JOURNALD_UPDATE_EXPECTED=1 pytest tests/integration/client/test_polyglot.py.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pb_grpc

from journald.core.fingerprint import hash_system_prompt, hash_tools
from journald.core.records import GENESIS, decode
from tests.daemon import JOURNALD as JOURNALD_CLI
from tests.daemon import Daemon
from tests.integration.rpc import stub as rpc_stub
from tests.integration.rpc import write_long_run
from tests.waiting import NotYet, eventually

ROOT = Path(__file__).resolve().parents[3]
GO_DIR = ROOT / "clients" / "go"
TS_DIR = ROOT / "clients" / "ts"
EXPECTED = Path(__file__).resolve().parents[1] / "expected" / "polyglot_state.json"
RUN_ID = "polyglot-1"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
BUILD_TIMEOUT_S = 240
AGENT_TIMEOUT_S = 90  # a bound on an agent subprocess; generous for a loaded 2-core machine
BYTES_FIELDS = {"content_json", "prompt_json"}
# The configuration both agents declare (clients/go/examples/agent, clients/ts/examples).
SYSTEM_PROMPT = ["You are a careful research agent.", "Answer with sources: <cite>, & never guess."]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city (°C)",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "name": "lookup",
        "description": "Look a term up",
        "input_schema": {
            "type": "object",
            "properties": {"term": {"type": "string"}},
            "required": ["term"],
        },
    },
]


def _missing(why: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"polyglot test cannot run in CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Build the Go agent binary and compile the TypeScript agent, once per module."""
    out = tmp_path_factory.mktemp("agents")
    go = shutil.which("go")
    node = shutil.which("node")
    if go is None:
        _missing("go is not installed")
    if node is None:
        _missing("node is not installed")
    if not (TS_DIR / "node_modules" / ".bin" / "tsc").exists():
        _missing("clients/ts/node_modules is missing: run scripts/setup_clients.sh")
    ts_out = out / "ts"
    go_out = out / "go"
    # tsc and go build run side by side (each is stopped by its own pid on failure).
    tsc = subprocess.Popen(
        [
            str(TS_DIR / "node_modules" / ".bin" / "tsc"),
            "-p",
            "tsconfig.json",
            "--outDir",
            str(ts_out),
        ],
        cwd=TS_DIR,
    )
    try:
        subprocess.run(
            [go, "build", "-o", f"{go_out}/", "./examples/agent", "./examples/quickstart"],
            cwd=GO_DIR,
            check=True,
            timeout=BUILD_TIMEOUT_S,
        )
        assert tsc.wait(timeout=BUILD_TIMEOUT_S) == 0, "tsc failed"
    finally:
        if tsc.poll() is None:
            tsc.kill()
            tsc.wait()
    go_bin, quick_bin = go_out / "agent", go_out / "quickstart"
    return {
        "go": [str(go_bin)],
        "go-quickstart": [str(quick_bin)],
        "ts": [node, str(ts_out / "examples" / "agent.js")],
        "ts-quickstart": [node, str(ts_out / "examples" / "quickstart.js")],
    }


def _env() -> dict[str, str]:
    # The compiled TypeScript lives outside clients/ts: resolve its packages from there.
    return {**os.environ, "NODE_PATH": str(TS_DIR / "node_modules")}


def _run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=AGENT_TIMEOUT_S, env=_env(), **kw
    )
    assert proc.returncode == 0, f"{argv[0]} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


class Agent:
    """A long-lived agent subprocess (stdout to a file), stopped by its own pid."""

    def __init__(self, argv: list[str], out: Path) -> None:
        self.out = out
        with open(out, "wb") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=_env())

    def wait_line(self, prefix: str) -> str:
        def find() -> str:
            for line in self.out.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                raise AssertionError(f"no {prefix!r} line; agent output:\n{self.out.read_text()}")
            raise NotYet(prefix)

        return eventually(find, what=f"a {prefix!r} line from the agent", timeout_s=AGENT_TIMEOUT_S)

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=AGENT_TIMEOUT_S)


@pytest.fixture
def stub(daemon: Daemon) -> Iterator[pb_grpc.JournalServiceStub]:
    with grpc.insecure_channel(daemon.target) as channel:
        yield pb_grpc.JournalServiceStub(channel)


def _plain(value: Any) -> Any:
    """MessageToDict output with the canonical-JSON bytes fields decoded to JSON."""
    if isinstance(value, dict):
        return {
            k: json.loads(base64.b64decode(v)) if k in BYTES_FIELDS else _plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _state_json(state: pb.RunState) -> dict[str, Any]:
    plain: dict[str, Any] = _plain(
        MessageToDict(
            state, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    )
    return plain


def _resume_when_released(agents: dict[str, list[str]], socket: str) -> dict[str, Any]:
    """The daemon releases a dead writer's lease at once; allow the kernel a moment."""

    def resume() -> dict[str, Any]:
        proc = subprocess.run(
            [*agents["ts"], "--socket", socket, "--run", RUN_ID, "resume"],
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT_S,
            env=_env(),
        )
        if proc.returncode == 0:
            summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
            return summary
        if "LockedError" in proc.stderr:
            raise NotYet(proc.stderr)
        raise AssertionError(f"TypeScript resume failed:\n{proc.stderr}")

    # each attempt is a whole agent process: on a loaded machine a few take seconds each
    return eventually(resume, what="the dead writer's lease to end", timeout_s=60.0)


def test_a_go_writer_killed_mid_turn_is_finished_by_a_typescript_writer_and_python_folds_the_expected_state(  # noqa: E501
    agents: dict[str, list[str]],
    daemon: Daemon,
    stub: pb_grpc.JournalServiceStub,
    tmp_path: Path,
) -> None:
    socket = str(daemon.socket)
    go = Agent([*agents["go"], "-socket", socket, "-run", RUN_ID, "start"], tmp_path / "go.out")
    try:
        assert go.wait_line("READY") == "READY 3"  # meta, assistant (2 calls), one result
    finally:
        go.kill9()  # no Close, no goodbye: the process simply dies
    assert go.proc.returncode == -signal.SIGKILL

    summary = _resume_when_released(agents, socket)
    assert summary["unanswered"] == ["toolu_zurich"]  # exactly the one open call
    assert "open_tool_calls" in summary["warnings"]
    assert summary["completed"] == [4]
    assert summary["lastSeq"] == 6  # result, final answer, terminal

    folded = stub.Fold(pb.FoldRequest(run_id=RUN_ID, governed=True))
    state = _state_json(folded.state)
    if os.environ.get("JOURNALD_UPDATE_EXPECTED") or not EXPECTED.exists():
        EXPECTED.write_text(json.dumps(state, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    assert state == json.loads(EXPECTED.read_text())
    assert folded.governance.synthesized_results == 0
    # Python hashes the agents' configuration to the same fingerprint as Go (which wrote
    # it) and TypeScript (whose resume passed the drift gate).
    assert state["fingerprint"]["system_prompt_sha256"] == hash_system_prompt(SYSTEM_PROMPT)
    assert state["fingerprint"]["tools_sha256"] == hash_tools(TOOLS)
    assert state["last_hash"] == summary["lastHash"]

    verified = stub.Verify(pb.VerifyRequest(run_id=RUN_ID))
    assert (verified.records, verified.last_seq) == (6, 6)
    assert verified.last_hash == summary["lastHash"]
    cli = subprocess.run(
        [*JOURNALD_CLI, "verify", "--socket", socket, "--json", RUN_ID],
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT_S,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == {
        "records": 6,
        "last_seq": 6,
        "last_hash": summary["lastHash"],
        "segments": verified.segments,
    }

    # The stored bytes decode as canonical records in the Python core and chain by prev;
    # the Go writer stamped seq 1-3, the TypeScript writer seq 4-6, each from its fixed clock.
    # Both writers ran under one W3C trace (OpenTelemetry API), each in its own span.
    prev = GENESIS
    stamps, spans = [], []
    for msg in stub.Load(pb.LoadRequest(run_id=RUN_ID)):
        rec = decode(msg.record.canonical)
        assert (rec.prev, rec.hash) == (prev, msg.record.hash)
        prev = rec.hash
        stamps.append(rec.ts)
        spans.append(dict(rec.trace or {}))
    go_span = {"trace_id": TRACE_ID, "span_id": "00f067aa0ba902b7"}
    ts_span = {"trace_id": TRACE_ID, "span_id": "53995c3f42cd8ad8"}
    assert spans == [go_span] * 3 + [ts_span] * 3
    assert stamps == [
        "2026-11-30T12:00:00.000000Z",
        "2026-11-30T12:00:01.000000Z",
        "2026-11-30T12:00:02.000000Z",
        "2026-11-30T12:01:00.000000Z",
        "2026-11-30T12:01:01.000000Z",
        "2026-11-30T12:01:02.000000Z",
    ]


@pytest.mark.parametrize("language", ["go", "ts"])
def test_locked_fingerprint_drift_and_invalid_record_arrive_as_typed_errors(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    flag = "-" if language == "go" else "--"
    proc = _run(
        [*agents[language], f"{flag}socket", str(daemon.socket), f"{flag}run", "errs", "errors"]
    )
    seen = {o["case"]: o for o in map(json.loads, proc.stdout.strip().splitlines())}
    assert set(seen) == {"locked", "invalid_record", "fingerprint_drift"}
    for case, outcome in seen.items():
        assert outcome["code"] == case, outcome
        assert outcome["typed"] is True, outcome
    locked = seen["locked"]
    assert locked["metadata"]["holder_name"] == f"{language}-agent"
    assert locked["metadata"]["holder_pid"].isdigit()
    assert seen["fingerprint_drift"]["diff"] == [
        "model: claude-test-1 -> claude-test-2",
        "system prompt: changed",
    ]
    if language == "ts":
        assert [seen[c]["class"] for c in ("locked", "invalid_record", "fingerprint_drift")] == [
            "LockedError",
            "InvalidRecordError",
            "FingerprintDriftError",
        ]


@pytest.mark.parametrize("language", ["go", "ts"])
def test_the_readme_quickstart_starts_crashes_resumes_and_finishes(
    agents: dict[str, list[str]],
    daemon: Daemon,
    stub: pb_grpc.JournalServiceStub,
    language: str,
) -> None:
    program = agents[f"{language}-quickstart"]
    env = {**_env(), "JOURNALD_SOCKET": str(daemon.socket)}
    run_id = f"quickstart-{language}"
    args = ["-run", run_id] if language == "go" else []
    tail = [] if language == "go" else [run_id]
    crashed = subprocess.run(
        [*program, *args, "start", *tail],
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT_S,
        env=env,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert "journaled seq 2" in crashed.stdout

    def resume() -> subprocess.CompletedProcess[str]:
        resumed = subprocess.run(
            [*program, *args, "resume", *tail],
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT_S,
            env=env,
        )
        if resumed.returncode != 0:  # the crashed writer's lease may not have ended yet
            raise NotYet(resumed.stderr + resumed.stdout)
        return resumed

    resumed = eventually(resume, what=f"the {language} quickstart to resume", timeout_s=60.0)
    assert "warning open_tool_calls" in resumed.stdout
    assert 'running add({"a": 2, "b": 3})' in resumed.stdout
    state = stub.Fold(pb.FoldRequest(run_id=run_id)).state
    assert (state.last_seq, len(state.messages), state.terminal.reason) == (5, 4, "completed")
    assert not state.HasField("pending")


def _client_test(
    agents: dict[str, list[str]],
    language: str,
    go_test: str,
    ts_test: str | list[str],
    env: dict[str, str],
    passes: int = 1,
) -> None:
    """Run Go tests (by name; several names are joined by |) or compiled TypeScript test
    files of the clients against a live daemon, and check all `passes` of them ran (those
    tests skip without one) and passed."""
    if language == "go":
        argv = [shutil.which("go") or "go", "test", "-count=1", "-run", f"^({go_test})$", "-v", "."]
        cwd = GO_DIR
    else:
        compiled = Path(agents["ts"][1]).parents[1] / "test"
        files = [ts_test] if isinstance(ts_test, str) else ts_test
        argv = [agents["ts"][0], "--test", *(str(compiled / f) for f in files)]
        cwd = TS_DIR
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    if language == "go":
        for name in go_test.split("|"):
            assert f"--- PASS: {name} " in out, out
        assert out.count("--- PASS: ") == passes, out
    else:
        assert f"# pass {passes}\n" in out, out
        assert "# skipped 0\n" in out, out


@pytest.mark.parametrize("language", ["go", "ts"])
def test_a_go_or_typescript_writer_closes_and_reopens_a_run_ten_times_without_locked(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # Run.Close / run.close() call Release before cancelling the Open stream, so no re-open
    # meets `locked` (clients/go/reopen_test.go, clients/ts/test/reopen.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    _client_test(
        agents,
        language,
        "TestClosingARunLetsItBeReopenedAtOnceTenTimesWithoutLocked",
        "reopen.test.js",
        env,
    )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_hold_many_runs_over_one_lease_set_and_free_them_all_on_close(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # eight runs over one Leases stream: appends, a typed refusal that ends nothing else, a
    # release that frees one run at once, and a close that frees them all
    # (clients/go/lease_set_test.go, clients/ts/test/lease_set.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    _client_test(
        agents,
        language,
        "TestManyRunsHeldOverOneLeaseSetAppendReleaseAndReopenAtOnce",
        "lease_set.test.js",
        env,
    )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_follow_list_changes_naming_a_run_written_and_deleted_until_stopped(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # ready first, then the run written and the run deleted are named; a cancelled context
    # (Go) or an aborted signal (TS) ends the stream without an error
    # (clients/go/list_changes_test.go, clients/ts/test/list_changes.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    _client_test(
        agents,
        language,
        "TestListChangesNamesARunWrittenAndDeletedAndClosesOnCancel",
        "list_changes.test.js",
        env,
        passes=2 if language == "ts" else 1,
    )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_surface_the_field_seq_and_run_of_a_refused_record(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # a repeated key, a lone surrogate, NaN: invalid_record with field, seq and run_id in the
    # metadata each client exposes (clients/go/refusals_test.go, clients/ts/test/refusals.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    _client_test(
        agents,
        language,
        "TestARefusedRecordCarriesItsFieldSeqAndRunIDAndTheRunWritesOn",
        "refusals.test.js",
        env,
    )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_journal_a_tool_result_over_the_record_limit_as_an_attachment(
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # refused with advice naming as_attachment, then stored as an attachment and journaled
    # as its block (clients/go/refusals_test.go, clients/ts/test/large_results.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    _client_test(
        agents,
        language,
        "TestAToolResultOverTheRecordLimitIsRefusedAndGoesInAsAnAttachment",
        "large_results.test.js",
        env,
    )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_fold_and_resume_page_every_message_of_a_run_past_the_window(
    agents: dict[str, list[str]], language: str, tmp_path: Path
) -> None:
    # a 1 MiB cap and ~1.4 MB of folded state: one answer with every message is refused, so
    # only the window and History pages bring the run (clients/go/window_test.go,
    # clients/ts/test/window.test.ts compare with the raw History pages)
    with Daemon(tmp_path, "file", "--max-message-bytes", "1MiB") as d:
        write_long_run(rpc_stub(d.target), "long", 1500, pad=800)
        env = {**_env(), "JOURNALD_TEST_SOCKET": str(d.socket), "JOURNALD_TEST_LONG_RUN": "long"}
        _client_test(
            agents,
            language,
            "TestFoldAndResumeOfARunLongerThanTheWindowHoldEveryMessage",
            "window.test.js",
            env,
        )


@pytest.mark.parametrize("language", ["go", "ts"])
def test_go_and_typescript_pipelined_writers_ack_in_order_and_fail_a_refused_append_with_its_followers(  # noqa: E501
    agents: dict[str, list[str]], daemon: Daemon, language: str
) -> None:
    # 16 appends in flight fold like unary ones; the agent pattern; a refused append voids the
    # ones behind it and the writer resyncs; the window blocks (clients/go/pipelined_test.go,
    # clients/ts/test/pipelined.test.ts); a stream cut after the daemon stored an append is
    # resent and stores every record once, whether cut by a bare UNAVAILABLE or a bare INTERNAL
    # (clients/go/relay_test.go, clients/ts/test/relay.test.ts)
    env = {**_env(), "JOURNALD_TEST_SOCKET": str(daemon.socket)}
    go_tests = "|".join(
        [
            "TestSixteenPipelinedAppendsAreAckedInOrderAndFoldLikeUnaryAppends",
            "TestAnAgentWaitsForItsAssistantAckRunsToolsAndStreamsTheirResultsBehindIt",
            "TestARefusedAppendFailsItAndTheAppendsBehindItWhileEarlierOnesStayStored",
            "TestAppendWaitsWhileTheWindowIsFullAndHonoursItsContext",
            "TestAStreamCutAfterTheDaemonStoredAnAppendIsResentAndEveryRecordIsStoredOnce",
            "TestAStreamCutByABareInternalIsResentAndEveryRecordIsStoredOnce",
            "TestCancellingTheWritersContextFailsItsAppendsInFlightAndTheRunWritesOnAfterClose",
        ]
    )
    ts_tests = ["pipelined.test.js", "relay.test.js"]
    _client_test(agents, language, go_tests, ts_tests, env, passes=7 if language == "go" else 6)
