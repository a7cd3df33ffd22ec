"""The ``Leases`` stream's wire contract (docs/protocol.md#many-leases-on-one-stream) on a real
daemon, through the generated stubs alone: answers name their requests, one run's requests are
answered in order, a refusal (the per-peer lease budget included) holds nothing, half-closing
releases everything, and a shutdown ends each lease with ``ended`` and finishes the stream."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.server.convert import fingerprint_to_pb
from tests.builders import FP
from tests.daemon import Daemon
from tests.integration.rpc import error_of

ANSWER_TIMEOUT_S = 30.0
pytestmark = pytest.mark.shared_daemon("file")


def acquire(
    request_id: int, run_id: str, mode: Any = pb.OPEN_MODE_CREATE_OR_RESUME
) -> pb.LeasesRequest:
    return pb.LeasesRequest(
        request_id=request_id,
        acquire=pb.OpenRequest(
            run_id=run_id,
            mode=mode,
            fingerprint=fingerprint_to_pb(FP),
            prompt_json=b"[]",
            client=pb.ClientInfo(name="wire", pid=1, host="h"),
        ),
    )


def release(request_id: int, run_id: str, lease_id: str) -> pb.LeasesRequest:
    return pb.LeasesRequest(
        request_id=request_id, release=pb.ReleaseRequest(run_id=run_id, lease_id=lease_id)
    )


class Stream:
    """One Leases call: ``send`` requests, ``answers(n)`` reads the next n answers."""

    def __init__(self, stub: Any) -> None:
        self._requests: queue.SimpleQueue[pb.LeasesRequest | None] = queue.SimpleQueue()
        self.call = stub.Leases(iter(self._requests.get, None))
        self._answers: queue.SimpleQueue[pb.LeasesResponse | BaseException | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for resp in self.call:
                self._answers.put(resp)
            self._answers.put(None)
        except grpc.RpcError as exc:
            self._answers.put(exc)

    def send(self, *reqs: pb.LeasesRequest) -> None:
        for r in reqs:
            self._requests.put(r)

    def answers(self, n: int) -> list[pb.LeasesResponse]:
        out = []
        for _ in range(n):
            got = self._answers.get(timeout=ANSWER_TIMEOUT_S)
            assert isinstance(got, pb.LeasesResponse), got
            out.append(got)
        return out

    def half_close(self) -> None:
        self._requests.put(None)

    def end(self) -> pb.LeasesResponse | BaseException | None:
        """What follows the last answer: None when the stream finished OK."""
        return self._answers.get(timeout=ANSWER_TIMEOUT_S)


@pytest.fixture
def stub(daemon: Daemon) -> Iterator[Any]:
    with grpc.insecure_channel(daemon.target) as ch:
        yield pbg.JournalServiceStub(ch)


def open_refusal(stub: Any, run_id: str) -> str:
    """The code a plain Open of ``run_id`` is refused with ('' when it is granted)."""
    call = stub.Open(acquire(0, run_id, pb.OPEN_MODE_RESUME).acquire)
    try:
        next(call)
        return ""
    except grpc.RpcError as exc:
        return error_of(exc).code
    finally:
        call.cancel()


def held(stub: Any) -> set[str]:
    return {r.run_id for r in stub.List(pb.ListRequest()).runs if r.status == "held"}


def test_answers_name_their_requests_and_one_runs_requests_are_answered_in_order(
    stub: Any,
) -> None:
    s = Stream(stub)
    s.send(acquire(7, "order-a"), acquire(8, "order-b"))
    first = {a.request_id: a for a in s.answers(2)}
    assert {a.run_id for a in first.values()} == {"order-a", "order-b"}
    lease_a = first[7].lease.lease_id
    # acquire, release, acquire again of one run, sent back to back
    s.send(acquire(9, "order-a"), release(10, "order-a", lease_a), acquire(11, "order-a"))
    got = s.answers(3)
    assert [a.request_id for a in got] == [9, 10, 11]
    assert got[0].refused.code == "locked"  # this very stream holds it
    assert got[0].refused.metadata["holder_name"] == "wire"
    assert got[1].released.released
    assert got[2].lease.lease_id not in ("", lease_a)
    assert got[2].lease.last_seq == 1
    s.call.cancel()


def test_a_release_of_a_lease_not_on_this_stream_is_answered_false_and_ends_nothing(
    stub: Any,
) -> None:
    s, other = Stream(stub), Stream(stub)
    s.send(acquire(1, "foreign"))
    lease = s.answers(1)[0].lease
    other.send(release(1, "foreign", lease.lease_id), release(2, "foreign", "not-a-lease"))
    assert [a.released.released for a in other.answers(2)] == [False, False]
    assert open_refusal(stub, "foreign") == "locked"
    s.call.cancel()
    other.call.cancel()


def test_half_closing_releases_every_lease_before_the_stream_finishes_ok(stub: Any) -> None:
    s = Stream(stub)
    s.send(*(acquire(i + 1, f"closing-{i}") for i in range(5)))
    assert all(a.HasField("lease") for a in s.answers(5))
    s.half_close()
    assert s.end() is None
    assert s.call.code() == grpc.StatusCode.OK
    # finished means released: no Open is refused afterwards, not even briefly
    assert [open_refusal(stub, f"closing-{i}") for i in range(5)] == [""] * 5


def test_a_request_with_no_operation_is_refused_alone(stub: Any) -> None:
    s = Stream(stub)
    s.send(acquire(1, "alone"), pb.LeasesRequest(request_id=2))
    got = {a.request_id: a for a in s.answers(2)}
    assert got[2].refused.code == "invalid_request"
    assert got[1].HasField("lease")
    assert open_refusal(stub, "alone") == "locked"
    s.call.cancel()


def test_the_lease_budget_refuses_one_acquire_which_holds_nothing(tmp_path: Path) -> None:
    with (
        Daemon(tmp_path, "memory", "--max-leases-per-peer", "2") as d,
        grpc.insecure_channel(d.target) as ch,
    ):
        stub = pbg.JournalServiceStub(ch)
        s = Stream(stub)
        s.send(acquire(1, "budget-0"), acquire(2, "budget-1"))
        leases = {a.run_id: a.lease for a in s.answers(2)}
        s.send(acquire(3, "budget-2"))
        (over,) = s.answers(1)
        assert over.refused.code == "resource_exhausted"
        assert over.refused.metadata["limit"] == "max_leases_per_peer"
        assert held(stub) == {"budget-0", "budget-1"}  # the refusal took nothing
        # releasing one gives its share back: the refused acquire now succeeds
        s.send(release(4, "budget-0", leases["budget-0"].lease_id), acquire(5, "budget-2"))
        got = {a.request_id: a for a in s.answers(2)}
        assert got[4].released.released
        assert got[5].lease.run_id == "budget-2"
        s.call.cancel()


def test_a_shutdown_ends_each_lease_with_ended_then_finishes_the_stream(tmp_path: Path) -> None:
    d = Daemon(tmp_path, "memory").start()
    try:
        with grpc.insecure_channel(d.target) as ch:
            s = Stream(pbg.JournalServiceStub(ch))
            s.send(acquire(1, "shut-0"), acquire(2, "shut-1"))
            s.answers(2)
            assert d.stop() == 0
            ended = s.answers(2)
            assert sorted(a.run_id for a in ended) == ["shut-0", "shut-1"]
            assert {(a.request_id, a.ended.reason) for a in ended} == {(0, "shutdown")}
            assert s.end() is None
    finally:
        d.kill9()
