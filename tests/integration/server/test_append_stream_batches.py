"""AppendStream messages of several appends (docs/protocol.md#coalesced-stream-messages),
against a real daemon through the raw stub: each append of the message is handled as if it
were a message of its own, answered by one message; a refusal inside it keeps the appends
before it and ends the stream; a message that sets both forms is refused whole."""

from __future__ import annotations

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.rpc import Lease, error_of, stub

pytestmark = pytest.mark.shared_daemon("file")


def append(lease: Lease, *records: pb.Record) -> pb.AppendRequest:
    return pb.AppendRequest(run_id=lease.run_id, lease_id=lease.lease.lease_id, records=records)


def test_a_message_of_several_appends_is_answered_with_each_appends_acks_in_order(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "batches-ok")
    assert lease.lease.append_stream_batches
    appends = [
        append(lease, lease.assistant("a", "b", seq=2)),
        append(lease, lease.result("a", seq=3), lease.result("b", seq=4)),
        append(lease, lease.terminal(seq=5)),
    ]
    (resp,) = list(s.AppendStream(iter([pb.AppendStreamRequest(appends=appends)])))
    assert not resp.HasField("response")
    assert [[a.seq for a in r.acks] for r in resp.responses] == [[2], [3, 4], [5]]
    stored = [r.record for r in s.Load(pb.LoadRequest(run_id="batches-ok"))]
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5]
    assert [r.hash for r in stored[1:]] == [a.hash for r in resp.responses for a in r.acks]
    lease.release()


def test_a_refused_append_inside_a_message_keeps_the_ones_before_it_and_ends_the_stream(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "batches-refused")
    appends = [
        append(lease, lease.assistant("a", seq=2)),
        append(lease, lease.result("a", seq=3)),
        append(lease, lease.result("nobody-called-this", seq=4)),
        append(lease, lease.terminal(seq=5)),
    ]
    answers: list[pb.AppendStreamResponse] = []
    stream = s.AppendStream(iter([pb.AppendStreamRequest(appends=appends)]))
    with pytest.raises(grpc.RpcError) as refused:
        answers.extend(stream)
    assert error_of(refused.value).code == "invalid_record"
    assert [[a.seq for a in r.acks] for ans in answers for r in ans.responses] == [[2], [3]]
    stored = [r.record.seq for r in s.Load(pb.LoadRequest(run_id="batches-refused"))]
    assert stored == [1, 2, 3]
    lease.release()


def test_a_message_setting_both_append_and_appends_is_refused_and_writes_nothing(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    lease = Lease(s, "batches-both")
    msg = pb.AppendStreamRequest(
        append=append(lease, lease.assistant(seq=2)), appends=[append(lease, lease.terminal(seq=3))]
    )
    with pytest.raises(grpc.RpcError) as refused:
        list(s.AppendStream(iter([msg])))
    assert error_of(refused.value).code == "invalid_request"
    assert [r.record.seq for r in s.Load(pb.LoadRequest(run_id="batches-both"))] == [1]
    lease.release()
