"""Framework state through a real daemon: appended beside the conversation (even while tool
calls are open), folded per (namespace, key), handed back with every lease and Fold, large
values held once as attachments."""

from __future__ import annotations

import hashlib

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

TOOL_USE = [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]


def test_state_is_appended_under_open_tool_calls_and_returned_by_fold_and_lease(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("thread-1", FP, "hi") as run:
            run.assistant(TOOL_USE, stop_reason="tool_use")
            acks = run.append_many(
                [
                    jc.Entry.state("lg.writes", "cp1|task|0", "msgpack", b"\x00\xff"),
                    jc.Entry.state("lg.writes", "cp1|task|1", "null", b""),
                ]
            )
            assert [a.seq for a in acks] == [3, 4]
            run.tool_result("t1", "ok")
            run.append_many([jc.Entry.state("lg.writes", "cp1|task|1", deleted=True)])
            state = run.fold()
        assert state.pending is None
        assert [m["role"] for m in state.messages] == ["user", "assistant", "user"]
        assert [(e.namespace, e.key, e.type, e.data, e.seq) for e in state.state] == [
            ("lg.writes", "cp1|task|0", "msgpack", b"\x00\xff", 3)
        ]
        stored = client.load("thread-1", from_seq=3)
        first = next(iter(stored))
        assert first.kind == "state"
        assert first.payload == {
            "namespace": "lg.writes",
            "key": "cp1|task|0",
            "type": "msgpack",
            "data": "AP8=",
        }
        assert hashlib.sha256(first.canonical).hexdigest() == first.hash
        with client.resume("thread-1", FP) as again:
            assert again.state.state == state.state


def test_a_large_value_is_stored_once_as_an_attachment_and_referenced_by_digest(
    daemon: Daemon,
) -> None:
    blob = bytes(range(256)) * 400
    with jc.connect(str(daemon.socket)) as client, client.start("thread-2", FP, "hi") as run:
        refs = [client.put_attachment("thread-2", blob, "application/msgpack") for _ in range(2)]
        assert [r.existed for r in refs] == [False, True]
        run.append_many(
            [
                jc.Entry.state(
                    "lg.blob", f"|ch|{v}", "msgpack", sha256=refs[0].sha256, size=len(blob)
                )
                for v in (1, 2)
            ]
        )
        entries = run.fold().state
        assert {e.sha256 for e in entries} == {hashlib.sha256(blob).hexdigest()}
        assert all(e.data == b"" and e.size == len(blob) for e in entries)
        assert client.get_attachment("thread-2", entries[0].sha256) == blob


def test_a_malformed_state_value_is_refused_naming_the_field_and_nothing_is_written(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("thread-3", FP, "hi") as run:
        bad = jc.Entry.state("lg", "", "msgpack", b"x")
        with pytest.raises(jc.InvalidRecord, match=r"state\.key"):
            run.append_many([bad])
        assert run.fold().last_seq == 1
