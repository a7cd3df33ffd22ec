"""The daemon over its real unix socket: leases, appends, gates, errors, tails, lifecycle."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from journald_client.pb import journal_pb2 as pb

from journald.core import fingerprint
from tests.builders import FP, text
from tests.daemon import Daemon
from tests.integration.conftest import BACKEND
from tests.integration.rpc import Lease, blocks, error_of, stub, until_unlocked
from tests.waiting import wait_until


def code_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code(), error_of(info.value).code


def test_second_open_is_refused_with_locked_naming_the_holder(daemon: Daemon) -> None:
    s = stub(daemon.target)
    first = Lease(s, "held-run", name="researcher", pid=777, host="box-a")
    with pytest.raises(grpc.RpcError) as info:
        Lease(s, "held-run", mode=pb.OPEN_MODE_RESUME)
    detail = error_of(info.value)
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert detail.code == "locked"
    assert detail.metadata["holder_name"] == "researcher"
    assert detail.metadata["holder_pid"] == "777"
    assert detail.metadata["holder_host"] == "box-a"
    assert "researcher (pid 777 on box-a)" in detail.message
    first.close()


def test_lease_is_released_the_moment_its_stream_is_cancelled(daemon: Daemon) -> None:
    s = stub(daemon.target)
    first = Lease(s, "released-run")
    first.append(first.assistant())
    first.close()
    second = until_unlocked(lambda: Lease(s, "released-run", mode=pb.OPEN_MODE_RESUME))
    assert second.lease.last_seq == 2
    assert second.lease.resume_at_input_boundary is False  # one-shot run


def test_append_with_a_dead_or_unknown_lease_is_lease_lost(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "lease-run")
    dead = lease.lease.lease_id
    lease.close()
    # the daemon ends a cancelled stream's lease a moment later: once the run opens again
    until_unlocked(lambda: Lease(s, "lease-run", mode=pb.OPEN_MODE_RESUME)).release()
    for lease_id in (dead, "", "not-a-lease"):
        code, err = code_of(
            lambda lid=lease_id: s.Append(
                pb.AppendRequest(run_id="lease-run", lease_id=lid, records=[lease.assistant(seq=2)])
            )
        )
        assert (code, err) == (grpc.StatusCode.FAILED_PRECONDITION, "lease_lost")


def test_retry_of_an_acknowledged_record_is_a_duplicate_and_other_bytes_conflict(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "retry-run")
    rec = lease.assistant("t1")
    first = lease.append(rec).acks[0]
    again = lease.append(rec).acks[0]
    assert (again.seq, again.hash, again.duplicate) == (first.seq, first.hash, True)
    other = lease.assistant("t2", seq=first.seq)
    code, err = code_of(lambda: lease.append(other))
    assert (code, err) == (grpc.StatusCode.ABORTED, "seq_conflict")
    code, err = code_of(lambda: lease.append(lease.result("t1", seq=first.seq + 5)))
    assert err == "seq_gap"
    loaded = [r.record.seq for r in s.Load(pb.LoadRequest(run_id="retry-run"))]
    assert loaded == [1, 2]


def test_appends_arriving_out_of_order_on_one_run_are_all_stored_in_seq_order(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "parallel-run")
    calls = [f"t{i}" for i in range(6)]
    lease.append(lease.assistant(*calls))
    base = lease.seq
    errors: list[Exception] = []

    def send(i: int) -> None:
        try:
            lease.stub.Append(
                pb.AppendRequest(
                    run_id="parallel-run",
                    lease_id=lease.lease.lease_id,
                    records=[lease.result(calls[i], seq=base + 1 + i)],
                )
            )
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in reversed(range(6))]
    for t in threads:
        t.start()
    wait_until(lambda: not any(t.is_alive() for t in threads), what="the six parallel appends")
    assert errors == []
    state = s.Fold(pb.FoldRequest(run_id="parallel-run")).state
    assert state.last_seq == base + 6
    assert not state.HasField("pending")
    assert state.counters.tool_calls == 6
    s.Verify(pb.VerifyRequest(run_id="parallel-run"))


def test_each_resume_gate_is_refused_with_its_own_code_in_order(daemon: Daemon) -> None:
    s = stub(daemon.target)
    done = Lease(s, "gate-done")
    done.append(done.terminal("completed"))
    done.release()
    drifted = fingerprint.compute(
        provider="anthropic",
        model="claude-other",
        system_prompt=["changed"],
        tools=[],
        thinking="off",
        max_tokens=1024,
        max_iterations=20,
    )
    other_provider = fingerprint.Fingerprint(**{**FP.as_json(), "provider": "openai"})
    # completed wins over every later gate
    code, err = code_of(
        lambda: Lease(s, "gate-done", mode=pb.OPEN_MODE_RESUME, interactive=True, fp=other_provider)
    )
    assert (code, err) == (grpc.StatusCode.FAILED_PRECONDITION, "completed")

    open_run = Lease(s, "gate-open")
    open_run.release()
    cases = [
        (dict(interactive=True, fp=other_provider), "interactivity_mismatch"),
        (dict(fp=other_provider, force=True), "provider_changed"),
        (dict(fp=drifted), "fingerprint_drift"),
    ]
    for kwargs, want in cases:
        with pytest.raises(grpc.RpcError) as info:
            Lease(s, "gate-open", mode=pb.OPEN_MODE_RESUME, **kwargs)  # type: ignore[arg-type]
        detail = error_of(info.value)
        assert detail.code == want
        if want == "fingerprint_drift":
            assert list(detail.diff) == [
                "model: claude-test -> claude-other",
                "system prompt: changed",
                "tools: changed",
            ]
    forced = Lease(s, "gate-open", mode=pb.OPEN_MODE_RESUME, fp=drifted, force=True)
    assert [w.code for w in forced.lease.warnings] == ["fingerprint_drift_forced"]
    forced.close()


def _files(data_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_dir)): p.read_bytes()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and p.name not in {"daemon.lock", "meta.json"}
    }


def test_bad_input_gets_a_typed_status_and_changes_no_journal_byte(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "bad-input")
    lease.append(lease.assistant("t1"))
    before = _files(daemon.data_dir)
    lid = lease.lease.lease_id
    bad_records = [
        pb.Record(seq=3),  # no payload
        pb.Record(
            seq=3, tool_result=pb.ToolResultPayload(tool_use_id="t1", content_json=b"{not json")
        ),
        pb.Record(
            seq=3,
            tool_result=pb.ToolResultPayload(
                tool_use_id="t1", content_json=blocks({"type": "mystery"})
            ),
        ),
        pb.Record(
            seq=3,
            tool_result=pb.ToolResultPayload(tool_use_id="nope", content_json=blocks(text("x"))),
        ),
        pb.Record(seq=3, user=pb.UserPayload(content_json=blocks(text("too early")))),
        pb.Record(seq=3, format_version=2, terminal=pb.TerminalPayload(reason="completed")),
        pb.Record(seq=3, terminal=pb.TerminalPayload(reason="exploded")),
        pb.Record(seq=3, ts="yesterday", terminal=pb.TerminalPayload(reason="completed")),
        pb.Record(
            seq=3, type="journald.v1.record.user", terminal=pb.TerminalPayload(reason="completed")
        ),
        pb.Record(seq=3, meta=pb.MetaPayload(run_id="bad-input")),
        pb.Record(
            seq=3,
            tool_result=pb.ToolResultPayload(
                tool_use_id="t1", content_json=b'[{"type":"text","text":"x","score":0.5}]'
            ),
        ),
        pb.Record(seq=9, terminal=pb.TerminalPayload(reason="completed")),
        pb.Record(seq=2, terminal=pb.TerminalPayload(reason="completed")),
    ]
    want = (
        ["invalid_record"] * 5
        + ["version_unsupported"]
        + ["invalid_record"] * 5
        + ["seq_gap", "seq_conflict"]
    )
    got = []
    for rec in bad_records:
        with pytest.raises(grpc.RpcError) as info:
            s.Append(pb.AppendRequest(run_id="bad-input", lease_id=lid, records=[rec]))
        got.append(error_of(info.value).code)
    assert got == want
    for run_id in ("../x", "a/b", "", "-lead", "x" * 129, "sp ace", "dot.dot"):
        with pytest.raises(grpc.RpcError) as info:
            Lease(s, run_id)
        assert error_of(info.value).code == "invalid_id"
        with pytest.raises(grpc.RpcError) as info:
            s.Fold(pb.FoldRequest(run_id=run_id))
        assert error_of(info.value).code == "invalid_id"
    assert _files(daemon.data_dir) == before
    assert not (daemon.data_dir.parent / "x").exists()
    # the daemon is still up and the lease still works
    assert lease.append(lease.result("t1")).acks[0].seq == 3


def test_over_size_record_is_refused_naming_the_limit(tmp_path: Path) -> None:
    with Daemon(tmp_path, BACKEND, "--max-record-bytes", "2k") as d:
        s = stub(d.target)
        lease = Lease(s, "big")
        lease.append(lease.assistant("t1"))
        huge = pb.Record(
            seq=3,
            tool_result=pb.ToolResultPayload(
                tool_use_id="t1", content_json=blocks(text("x" * 5000))
            ),
        )
        with pytest.raises(grpc.RpcError) as info:
            lease.append(huge)
        detail = error_of(info.value)
        assert detail.code == "invalid_record"
        assert "2048 bytes" in detail.message


def test_watch_streams_new_records_and_ends_when_the_run_is_deleted(daemon: Daemon) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "watched")
    lease.append(lease.assistant("t1"))
    seen: list[int] = []
    watch = s.Watch(pb.WatchRequest(run_id="watched", from_seq=2))
    reader = threading.Thread(target=lambda: seen.extend(e.record.seq for e in watch))
    reader.start()
    lease.append(lease.result("t1"))
    lease.append(lease.terminal())
    lease.close()
    wait_until(lambda: len(seen) >= 3, what="the watch to stream seqs 2-4")
    assert until_unlocked(lambda: s.Delete(pb.DeleteRequest(run_id="watched"))).deleted
    wait_until(lambda: not reader.is_alive(), what="the watch to end with the deleted run")
    assert seen == [2, 3, 4]
    assert s.Delete(pb.DeleteRequest(run_id="watched")).deleted is False


def test_sigterm_ends_lease_streams_with_a_shutdown_event_and_exits_zero(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, BACKEND) as d:  # stopped by its pid on every path, also on failure
        s = stub(d.target)
        lease = Lease(s, "shutdown-run")
        lease.append(lease.assistant())
        os.kill(d.pid, signal.SIGTERM)
        events = list(lease.call)
        assert d.proc is not None
        assert d.proc.wait(20) == 0
        assert [e.WhichOneof("event") for e in events] == ["ended"]
        assert events[0].ended.reason == "shutdown"
        d.start()
        again = Lease(stub(d.target), "shutdown-run", mode=pb.OPEN_MODE_RESUME)
        assert again.lease.last_seq == 2
        again.close()


def test_second_daemon_on_the_same_data_dir_refuses_naming_the_first_pid(
    daemon: Daemon,
    tmp_path: Path,
) -> None:
    other = Daemon(tmp_path / "other", BACKEND, data_dir=daemon.data_dir)
    (tmp_path / "other").mkdir()
    proc = subprocess.run(other.command(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert f"pid {daemon.pid}" in proc.stderr
    assert "another journald daemon" in proc.stderr


def test_health_and_reflection_services_answer(daemon: Daemon) -> None:
    ch = grpc.insecure_channel(daemon.target)
    health = health_pb2_grpc.HealthStub(ch).Check(
        health_pb2.HealthCheckRequest(service="journald.v1.JournalService")
    )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    answers = list(
        refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    )
    names = {s.name for s in answers[0].list_services_response.service}
    assert "journald.v1.JournalService" in names


def test_socket_and_data_dir_are_private_to_the_user(daemon: Daemon) -> None:
    assert daemon.socket.stat().st_mode & 0o777 == 0o600
    assert daemon.socket.parent.stat().st_mode & 0o777 == 0o700
    assert daemon.data_dir.stat().st_mode & 0o777 == 0o700


def test_release_frees_the_run_before_it_returns_so_a_reopen_never_sees_locked(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    for round_ in range(5):
        mode = pb.OPEN_MODE_CREATE if round_ == 0 else pb.OPEN_MODE_RESUME
        lease = Lease(s, "handover", mode=mode)
        lease.append(lease.assistant())
        released = s.Release(pb.ReleaseRequest(run_id="handover", lease_id=lease.lease.lease_id))
        assert released.released is True
        events = list(lease.call)
        assert [e.ended.reason for e in events] == ["released"]
        again = s.Release(pb.ReleaseRequest(run_id="handover", lease_id=lease.lease.lease_id))
        assert again.released is False
    final = Lease(s, "handover", mode=pb.OPEN_MODE_RESUME)
    assert final.lease.last_seq == 6
    final.close()
