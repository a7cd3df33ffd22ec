"""A writer in a language journald has no client for, built from the proto and
docs/protocol.md alone, writes a run the daemon and its CLI accept.

``conformance/cpp/writer.cc`` is compiled by ``scripts/setup_conformance.sh`` (``make
conformance``, part of ``make test``) from stubs that protoc generates out of
``proto/journald/v1/journal.proto``. It opens a run, journals an assistant turn with a
tool_use, the tool's result (retried once after a "lost" ack), the final answer and a
terminal, predicting every stored byte and hash; provokes two refusals and reads them from
the error trailer; releases the lease. Here it runs against a real daemon, and then
``journald verify`` must accept the run and ``journald replay`` must show it.

Without the binary the test skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import JOURNALD as JOURNALD_CLI
from tests.daemon import Daemon
from tests.integration.rpc import stub

ROOT = Path(__file__).resolve().parents[3]
WRITER = ROOT / "conformance" / "cpp" / "build" / "journald-conformance"
RUN_ID = "conformance-cpp-1"
TIMEOUT_S = 60


def _writer() -> Path:
    if not os.access(WRITER, os.X_OK):
        why = f"{WRITER.relative_to(ROOT)} is not built: run scripts/setup_conformance.sh"
        if os.environ.get("CI"):
            pytest.fail(f"conformance test cannot run in CI: {why}")
        pytest.skip(why)
    return WRITER


def _cli(daemon: Daemon, *args: str) -> str:
    proc = subprocess.run(
        [*JOURNALD_CLI, *args[:1], "--socket", str(daemon.socket), *args[1:]],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, f"journald {args[0]} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_a_cpp_writer_built_from_the_proto_alone_writes_a_run_verify_accepts(
    daemon: Daemon,
) -> None:
    proc = subprocess.run(
        [str(_writer()), str(daemon.socket), RUN_ID],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, f"the C++ writer failed:\n{proc.stdout}{proc.stderr}"

    stored = [r.record for r in stub(daemon.target).Load(pb.LoadRequest(run_id=RUN_ID))]
    kinds = [r.WhichOneof("payload") for r in stored]
    assert kinds == ["meta", "assistant", "tool_result", "assistant", "terminal"]
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5]
    assert stored[-1].hash in proc.stdout  # the writer predicted the last hash itself

    verified = _cli(daemon, "verify", RUN_ID)
    assert f"run {RUN_ID}: 5 records" in verified
    assert "hash chain intact" in verified
    replayed = _cli(daemon, "replay", RUN_ID)
    for line in ("What is 2 + 3?", '-> [toolu_1] add {"a": 2, "b": 3}', "<- [toolu_1] 5"):
        assert line in replayed
    assert "2 + 3 = 5" in replayed
    assert "ended: completed" in replayed
