"""Client error mapping from a real ``journald-error-bin`` trailer, for every code.

A real gRPC server on a unix socket fails each call with the daemon's status for a code and
a serialized ``ErrorDetail`` trailer; the client must raise the matching typed exception.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import journald_client as jc
import pytest
from journald_client import codec
from journald_client import errors as cerr
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core import errors as derr

EXPECTED_CLASS = {
    "session_not_found": jc.SessionNotFound,
    "session_exists": jc.SessionExists,
    "invalid_id": jc.InvalidId,
    "invalid_record": jc.InvalidRecord,
    "seq_gap": jc.SeqGap,
    "seq_conflict": jc.SeqConflict,
    "locked": jc.Locked,
    "lease_lost": jc.LeaseLost,
    "completed": jc.Completed,
    "interactivity_mismatch": jc.InteractivityMismatch,
    "provider_changed": jc.ProviderChanged,
    "fingerprint_drift": jc.FingerprintDrift,
    "version_unsupported": jc.VersionUnsupported,
    "store_corrupted": jc.StoreCorrupted,
    "turn_running": jc.TurnRunning,
    "checkpoint_not_found": jc.CheckpointNotFound,
    "attachment_not_found": jc.AttachmentNotFound,
    "session_mismatch": jc.SessionMismatch,
    "checkpoint_import_invalid": jc.CheckpointImportInvalid,
    "invalid_request": jc.InvalidRequest,
    "invalid_checkpoint_id": jc.InvalidCheckpointId,
    "invalid_digest": jc.InvalidDigest,
    "response_too_large": jc.ResponseTooLarge,
    "backend_unavailable": jc.BackendUnavailable,
    "storage_full": jc.StorageFull,
    "unsupported": jc.Unsupported,
    "permission_denied": jc.PermissionDenied,
    "resource_exhausted": jc.ResourceExhausted,
}


class _Failing(pbg.JournalServiceServicer):
    """Fold fails with the code named by run_id; ``bare-<STATUS>`` fails without a trailer."""

    def Fold(self, request: pb.FoldRequest, context: Any) -> pb.FoldResponse:
        drift = ["model: a -> b", "system prompt: changed"]
        if request.run_id.startswith("bare-"):
            context.abort(getattr(grpc.StatusCode, request.run_id[5:]), "no trailer here")
        if request.run_id == "daemon-internal":  # the daemon's own bug report, trailer and all
            detail = pb.ErrorDetail(code="internal", message="a daemon bug; see its log")
            context.set_trailing_metadata((("journald-error-bin", detail.SerializeToString()),))
            context.abort(grpc.StatusCode.INTERNAL, detail.message)
        cls = derr.ERRORS_BY_CODE[request.run_id]
        detail = pb.ErrorDetail(
            code=cls.code,
            message=f"{cls.code} happened; do the thing",
            metadata={"run_id": "r1", "holder_name": "bot", "holder_pid": "77"},
            diff=drift if cls.code == "fingerprint_drift" else [],
        )
        context.set_trailing_metadata((("journald-error-bin", detail.SerializeToString()),))
        context.abort(getattr(grpc.StatusCode, cls.grpc_status), detail.message)
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    sock_dir = tempfile.mkdtemp(prefix="jdc-")
    path = os.path.join(sock_dir, "s.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    # only Fold is served (the other RPCs are never called): the servicer stays abstract
    pbg.add_JournalServiceServicer_to_server(_Failing(), server)  # type: ignore[abstract]
    server.add_insecure_port("unix:" + path)
    server.start()
    try:
        yield path
    finally:
        server.stop(None).wait()
        for name in os.listdir(sock_dir):
            os.unlink(os.path.join(sock_dir, name))
        os.rmdir(sock_dir)


def test_every_daemon_code_has_a_client_class() -> None:
    assert set(cerr.ERRORS_BY_CODE) == set(derr.ERRORS_BY_CODE) == set(EXPECTED_CLASS)


@pytest.mark.parametrize("code", sorted(EXPECTED_CLASS))
def test_a_failed_call_raises_the_typed_exception_of_its_trailer_code(
    target: str, code: str
) -> None:
    with jc.Client(target) as client, pytest.raises(jc.JournaldError) as info:
        client.fold(code)
    err = info.value
    assert type(err) is EXPECTED_CLASS[code]
    assert err.code == code
    assert err.message == f"{code} happened; do the thing"
    assert err.metadata["run_id"] == "r1"
    assert err.status == getattr(grpc.StatusCode, derr.ERRORS_BY_CODE[code].grpc_status)
    assert str(err).startswith(f"{code}: ")


def test_fingerprint_drift_carries_the_per_field_diff(target: str) -> None:
    with jc.Client(target) as client, pytest.raises(jc.FingerprintDrift) as info:
        client.fold("fingerprint_drift")
    assert info.value.diff == ["model: a -> b", "system prompt: changed"]
    assert isinstance(info.value, jc.GateError)


def test_locked_names_the_holder(target: str) -> None:
    with jc.Client(target) as client, pytest.raises(jc.Locked) as info:
        client.fold("locked")
    assert (info.value.holder_name, info.value.holder_pid) == ("bot", 77)
    assert isinstance(info.value, jc.LeaseError)


def test_the_hierarchy_groups_codes_by_kind() -> None:
    assert issubclass(jc.SeqConflict, jc.SeqError)
    assert issubclass(jc.Completed, jc.GateError)
    assert issubclass(jc.SessionNotFound, jc.NotFoundError)
    assert issubclass(jc.InvalidId, jc.InvalidArgumentError)
    for cls in (jc.InvalidRequest, jc.InvalidCheckpointId, jc.InvalidDigest):
        assert issubclass(cls, jc.InvalidArgumentError)
    assert issubclass(jc.DaemonUnavailable, jc.BackendUnavailable)


def test_a_failure_without_a_trailer_falls_back_to_the_grpc_status(target: str) -> None:
    with jc.Client(target) as client:
        with pytest.raises(jc.NotFoundError) as nf:
            client.fold("bare-NOT_FOUND")
        assert nf.value.code == "not_found"
        with pytest.raises(jc.JournaldError) as big:
            client.fold("bare-RESOURCE_EXHAUSTED")
        assert big.value.code == "resource_exhausted"


@pytest.mark.parametrize("status", ["INTERNAL", "UNKNOWN"])
def test_a_bare_internal_or_unknown_is_the_transport_failing_and_retried_as_unavailable(
    target: str, status: str
) -> None:
    with jc.Client(target) as client, pytest.raises(jc.DaemonUnavailable) as info:
        client.fold(f"bare-{status}")
    err = info.value
    assert err.code == "backend_unavailable"
    assert err.metadata["grpc_status"] == status
    assert "no trailer here" in err.message
    assert "without journald's error trailer" in err.message
    assert codec.needs_reopen(err)  # the writers reconnect and resend, as after UNAVAILABLE


def test_the_daemons_own_internal_with_its_trailer_stays_an_internal_error(target: str) -> None:
    with jc.Client(target) as client, pytest.raises(jc.JournaldError) as info:
        client.fold("daemon-internal")
    assert type(info.value) is jc.JournaldError
    assert info.value.code == "internal"
    assert info.value.message == "a daemon bug; see its log"
    assert not codec.needs_reopen(info.value)


def test_an_unreachable_daemon_is_backend_unavailable_with_a_start_hint() -> None:
    path = os.path.join(tempfile.gettempdir(), f"jdc-none-{os.getpid()}.sock")
    with jc.Client(path) as client, pytest.raises(jc.DaemonUnavailable) as info:
        client.fold("r1")
    assert info.value.code == "backend_unavailable"
    assert "journald serve" in str(info.value)
    assert path in str(info.value)
    with pytest.raises(jc.DaemonUnavailable, match="journald serve"):
        jc.connect(path, timeout=0.2)
