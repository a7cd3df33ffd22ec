"""What the daemon does with the content JSON a client sends
(docs/protocol.md#content-normalisation).

It parses every ``content_json`` and stores the canonical encoding of the value: formatting
is not kept, every string is; the ack's hash is the hash of the stored bytes; a retry that
differs only in formatting is the same record; JSON it cannot store canonically is refused
and nothing is written. All of it through a real daemon and the raw generated stubs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from tests.builders import TS
from tests.daemon import Daemon
from tests.integration.conftest import BACKEND
from tests.integration.rpc import Lease, error_of, stub

# One text block, written the way no canonical encoder would write it: spaces and a newline,
# keys out of order, escapes for characters canonical JSON writes literally.
SENT = (
    b'[ {"z" : 1, "type":"text",\n  "text" : "caf\\u00e9 \\/ <b> & \\u2028 \\u00e9t\\u00e9",'
    b' "a": [ 2 , 3 ] } ]'
)
STORED = '[{"a":[2,3],"text":"café / <b> & \u2028 été","type":"text","z":1}]'.encode()
TOOL_INPUT = '{ "path" : "a.txt",\n  "limit": 2.50 }'  # raw model JSON, floats and all
PROVIDER_DATA = '{"cache_control": {"type": "ephemeral"}, "ratio": 1.0e3}'


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pbg.JournalServiceStub]:
    d = Daemon(Path(tmp_path_factory.mktemp("normalise")), BACKEND).start()
    try:
        yield stub(d.target)
    finally:
        d.stop()


def records(s: pbg.JournalServiceStub, run_id: str) -> list[pb.Record]:
    return [r.record for r in s.Load(pb.LoadRequest(run_id=run_id))]


def assistant_calling_read(seq: int) -> pb.Record:
    content = [
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": TOOL_INPUT},
        {"type": "provider", "provider": "anthropic", "data": PROVIDER_DATA},
    ]
    return pb.Record(
        seq=seq,
        ts=TS,
        assistant=pb.AssistantPayload(
            message=pb.Message(role="assistant", content_json=json.dumps(content).encode()),
            iteration=1,
            stop_reason="tool_use",
        ),
    )


def result(seq: int, content_json: bytes) -> pb.Record:
    return pb.Record(
        seq=seq,
        ts=TS,
        tool_result=pb.ToolResultPayload(tool_use_id="toolu_1", content_json=content_json),
    )


def open_with_call(s: pbg.JournalServiceStub, run_id: str) -> Lease:
    lease = Lease(s, run_id)
    lease.append(assistant_calling_read(lease.next_seq()))
    return lease


def test_content_is_stored_as_the_canonical_encoding_of_the_value_sent(
    journal: pbg.JournalServiceStub,
) -> None:
    lease = open_with_call(journal, "normal-form")
    ack = lease.append(result(3, SENT)).acks[0]
    stored = records(journal, "normal-form")[-1]
    assert b'"content":' + STORED + b"," in stored.canonical
    assert stored.tool_result.content_json == STORED
    assert ack.hash == stored.hash == hashlib.sha256(stored.canonical).hexdigest()
    lease.close()


def test_raw_json_carried_as_a_string_round_trips_byte_for_byte(
    journal: pbg.JournalServiceStub,
) -> None:
    lease = open_with_call(journal, "raw-text")
    stored = records(journal, "raw-text")[-1]
    tool_use, provider = json.loads(stored.assistant.message.content_json)
    assert tool_use["input"] == TOOL_INPUT
    assert provider["data"] == PROVIDER_DATA
    folded = journal.Fold(pb.FoldRequest(run_id="raw-text")).state
    assert folded.pending.unanswered[0].input_json == TOOL_INPUT
    lease.close()


def test_a_retry_differing_only_in_formatting_is_a_duplicate_and_another_value_conflicts(
    journal: pbg.JournalServiceStub,
) -> None:
    lease = open_with_call(journal, "retry-form")
    first = lease.append(result(3, SENT)).acks[0]
    again = lease.append(result(3, STORED)).acks[0]
    assert again.duplicate
    assert again.hash == first.hash
    other = STORED.replace(b'"z":1', b'"z":2')
    with pytest.raises(grpc.RpcError) as info:
        lease.append(result(3, other))
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert error_of(info.value).code == "seq_conflict"
    assert len(records(journal, "retry-form")) == 3
    lease.close()


@pytest.mark.parametrize(
    "content_json",
    [
        pytest.param(b'[{"type":"text","text":"cut', id="not-json"),
        pytest.param(b'[{"type":"text","text":"a","score":1.5}]', id="float"),
        pytest.param(b'[{"type":"text","text":"a","score":1e3}]', id="exponent"),
        pytest.param(b'[{"type":"text","text":"a","score":NaN}]', id="nan"),
        pytest.param(b'[{"type":"text","text":"\\ud800"}]', id="lone-surrogate"),
        pytest.param(b'[{"type":"text","text":"\xff"}]', id="not-utf8"),
        pytest.param(b'{"type":"text","text":"a"}', id="not-an-array"),
    ],
)
def test_content_that_cannot_be_stored_canonically_is_refused_and_nothing_is_written(
    journal: pbg.JournalServiceStub, content_json: bytes, request: pytest.FixtureRequest
) -> None:
    run_id = "refused-" + request.node.callspec.id
    lease = open_with_call(journal, run_id)
    before = [r.canonical for r in records(journal, run_id)]
    with pytest.raises(grpc.RpcError) as info:
        lease.append(result(3, content_json))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_of(info.value).code == "invalid_record"
    assert [r.canonical for r in records(journal, run_id)] == before
    lease.close()
