"""Records a client sends that the daemon must refuse, through the real daemon over gRPC:
each refusal is ``invalid_record`` with ``field``, ``seq`` and ``run_id`` in its metadata, a
sentence that names what is wrong (never Python's own text), and nothing stored.

JSON that ``json.loads`` accepts but no canonical encoder writes is refused too: a key
repeated in one object (the earlier value would silently vanish), ``NaN``/``Infinity``, a
lone UTF-16 surrogate escape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc
import journald_client as jc
import pytest
from journald_client.codec import Entry
from journald_client.pb import journal_pb2 as pb

from tests.builders import TS
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import Lease, error_of, stub

pytestmark = pytest.mark.shared_daemon("file")

PYTHON_TEXT = ("codec can't", "Out of range float", "JSON compliant", "Traceback")


def user(seq: int, content_json: bytes) -> pb.Record:
    return pb.Record(seq=seq, ts=TS, user=pb.UserPayload(content_json=content_json))


def result(seq: int, content_json: bytes, tid: str = "nope") -> pb.Record:
    return pb.Record(
        seq=seq,
        ts=TS,
        tool_result=pb.ToolResultPayload(tool_use_id=tid, content_json=content_json),
    )


@dataclass(frozen=True)
class Case:
    records: Callable[[int], list[pb.Record]]
    """The records of one Append, given the run's next seq."""
    field: str
    seq_offset: int
    """The refused record's seq, from the run's next seq."""
    says: str


CASES = {
    "repeated_key": Case(
        lambda n: [user(n, b'[{"type":"text","text":"kept?","text":"dropped?"}]')],
        "user.content_json",
        0,
        "the key 'text' appears twice",
    ),
    "repeated_key_nested": Case(
        lambda n: [user(n, b'[{"type":"text","text":"a","meta":{"k":1,"k":1}}]')],
        "user.content_json",
        0,
        "the key 'k' appears twice",
    ),
    "nan": Case(
        lambda n: [user(n, b'[{"type":"text","text":"a","n":NaN}]')],
        "user.content_json",
        0,
        "NaN is not a JSON number",
    ),
    "infinity": Case(
        lambda n: [user(n, b'[{"type":"text","text":"a"}]'), user(n + 1, b"[Infinity]")],
        "user.content_json",
        1,
        "Infinity is not a JSON number",
    ),
    "lone_surrogate": Case(
        lambda n: [user(n, b'[{"type":"text","text":"\\ud800"}]')],
        "user.content_json",
        0,
        "lone UTF-16 surrogate",
    ),
    "not_utf8": Case(
        lambda n: [user(n, b'[{"type":"text","text":"\xed\xa0\x80"}]')],
        "user.content_json",
        0,
        "not UTF-8",
    ),
    "not_json": Case(lambda n: [user(n, b"[{")], "user.content_json", 0, "not valid JSON"),
    "non_consecutive_batch": Case(
        lambda n: [
            user(n, b'[{"type":"text","text":"a"}]'),
            user(n + 2, b'[{"type":"text","text":"b"}]'),
        ],
        "records",
        2,
        "a batch needs consecutive seqs",
    ),
    "admission": Case(
        lambda n: [result(n, b'[{"type":"text","text":"a"}]', tid="no_call")],
        "type",
        0,
        "before any assistant record",
    ),
    "float": Case(
        lambda n: [user(n, b'[{"type":"text","text":"a","x":1.5}]')],
        "user.content[0].x",
        0,
        "floating-point",
    ),
    "integer_beyond_2_pow_53_in_content": Case(
        lambda n: [user(n, b'[{"type":"text","text":"a","n":9007199254740992}]')],
        "user.content[0].n",
        0,
        "beyond",
    ),
    "assistant_role_not_assistant": Case(
        lambda n: [
            pb.Record(
                seq=n,
                ts=TS,
                assistant=pb.AssistantPayload(
                    message=pb.Message(role="user", content_json=b'[{"type":"text","text":"a"}]'),
                    iteration=1,
                    stop_reason="end_turn",
                ),
            )
        ],
        "assistant.message.role",
        0,
        "'assistant' was expected",
    ),
    "no_payload": Case(lambda n: [pb.Record(seq=n, ts=TS)], "payload", 0, "exactly one payload"),
    "empty_append": Case(lambda n: [], "records", -1, "at least one record"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_refused_record_names_its_field_seq_and_run_and_nothing_is_stored(
    daemon: Daemon, name: str
) -> None:
    case = CASES[name]
    run_id = f"refused-{name.replace('_', '-')}"
    s = stub(daemon.target)
    lease = Lease(s, run_id)
    try:
        n = lease.next_seq()
        with pytest.raises(grpc.RpcError) as info:
            lease.append(*case.records(n))
        detail = error_of(info.value)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert detail.code == "invalid_record"
        expected_seq = 0 if case.seq_offset < 0 else n + case.seq_offset
        md = detail.metadata
        assert (md["field"], md["seq"], md["run_id"]) == (case.field, str(expected_seq), run_id)
        assert case.says in detail.message
        assert not any(t in detail.message for t in PYTHON_TEXT), detail.message
        stored = list(s.Load(pb.LoadRequest(run_id=run_id)))
        assert [m.record.seq for m in stored] == [1]
    finally:
        lease.release()


def test_open_refuses_a_prompt_with_a_repeated_key_naming_meta_seq_1_and_the_run(
    daemon: Daemon,
) -> None:
    s = stub(daemon.target)
    request = pb.OpenRequest(
        run_id="refused-prompt",
        mode=pb.OPEN_MODE_CREATE,
        fingerprint=pb.Fingerprint(provider="anthropic", model="m"),
        prompt_json=b'[{"type":"text","text":"a","text":"b"}]',
        created=TS,
    )
    with pytest.raises(grpc.RpcError) as info:
        next(iter(s.Open(request)))
    detail = error_of(info.value)
    assert detail.code == "invalid_record"
    assert dict(detail.metadata) == {
        "field": "meta.prompt_json",
        "seq": "1",
        "run_id": "refused-prompt",
    }
    assert "the key 'text' appears twice" in detail.message
    with pytest.raises(grpc.RpcError) as gone:
        s.Fold(pb.FoldRequest(run_id="refused-prompt"))
    assert error_of(gone.value).code == "session_not_found"


@pytest.mark.parametrize(
    ("name", "content_json", "says"),
    [
        ("repeat", b'[{"type":"text","text":"a","text":"b"}]', "appears twice"),
        ("surrogate", b'[{"type":"text","text":"\\udc00"}]', "lone UTF-16 surrogate"),
        ("inf", b'[{"type":"text","text":"a","n":-Infinity}]', "-Infinity is not a JSON number"),
    ],
)
def test_the_python_client_raises_invalid_record_with_the_field_seq_and_run(
    daemon: Daemon, name: str, content_json: bytes, says: str
) -> None:
    run_id = f"refused-client-{name}"
    with jc.connect(str(daemon.socket)) as client, client.start(run_id, FP, "hi") as run:
        entry = Entry.user("placeholder")
        entry.record.user.content_json = content_json
        with pytest.raises(jc.InvalidRecord) as info:
            run.append_many([entry])
        err = info.value
        assert err.metadata == {"field": "user.content_json", "seq": "2", "run_id": run_id}
        assert says in err.message
        assert run.last_seq == 1
        run.append_many([Entry.user("the run writes on")])  # nothing was held by the refusal
        assert [r.seq for r in client.load(run_id)] == [1, 2]
