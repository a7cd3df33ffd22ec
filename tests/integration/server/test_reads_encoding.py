"""What Watch sends for a stored record: its stored bytes and hash, the payload oneof naming
the kind, no second re-encoded copy of the payload; a record published to several tails is
encoded once for all of them. Load keeps the typed payload: a writer's lost-ack adoption
compares it (docs/protocol.md#reads)."""

from __future__ import annotations

import asyncio
import json

import grpc
import journald_client as jc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.records import GENESIS, make_record
from journald.server.leases import WatchHub
from tests.builders import TS, meta_payload
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP


def sent_once(rec: pb.Record) -> None:
    """The record's payload is in ``canonical`` and only there."""
    kind = rec.WhichOneof("payload")
    stored = json.loads(rec.canonical)
    assert kind is not None
    assert stored["seq"] == rec.seq
    assert kind in stored
    assert getattr(rec, kind).ByteSize() == 0


def test_watch_sends_each_payload_once_in_the_stored_bytes(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("once", FP, "hello") as run:
            run.user("a follow-up with some text in it")
            run.terminal("completed")
        with grpc.insecure_channel(daemon.target) as ch:
            stub = pbg.JournalServiceStub(ch)
            loaded = [m.record for m in stub.Load(pb.LoadRequest(run_id="once"))]
            tail = stub.Watch(pb.WatchRequest(run_id="once"))
            watched = [m.record for _, m in zip(range(3), tail, strict=False)]
            tail.cancel()
        assert [r.seq for r in loaded] == [r.seq for r in watched] == [1, 2, 3]
        for rec in watched:
            sent_once(rec)
        assert [r.canonical for r in loaded] == [r.canonical for r in watched]
        assert loaded[1].user.content_json  # Load: the typed payload too
        # the Python client reads kind and payload from a watched record as from a loaded one
        with client.watch("once") as tailing:
            tailed = [rec for _, rec in zip(range(3), tailing, strict=False)]
        assert [(r.kind, r.payload) for r in tailed] == [
            (r.kind, r.payload) for r in client.load("once")
        ]
        assert tailed[1].payload["content"] == [
            {"type": "text", "text": "a follow-up with some text in it"}
        ]


async def test_a_record_published_to_three_tails_is_encoded_once_for_all() -> None:
    hub = WatchHub()
    tails = [hub.subscribe("run-1") for _ in range(3)]
    rec = make_record(1, "meta", meta_payload("run-1"), GENESIS, TS)
    hub.publish("run-1", [rec])
    batches = [await asyncio.wait_for(q.get(), 5) for q in tails]
    assert batches[0] is batches[1] is batches[2]
    [(seq, response)] = batches[0]  # type: ignore[misc]
    assert seq == 1
    assert response.record.canonical == rec.raw
    sent_once(response.record)
