"""What an append costs per call, kept to once per call: the caller's trace context read from
the call's metadata at most once (a stream's messages share it), and the messages of an
``AppendStream`` that carry several appends at once (docs/protocol.md#coalesced-stream-messages),
queued whole so they share one group commit and are answered by one message."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from journald_proto import journal_pb2 as pb

from journald import telemetry
from journald.core.errors import InvalidRequest
from journald.server.runs import ack_pb
from journald.writer.run_writer import Ticket


def rpc_context() -> contextvars.Context | None:
    """The RPC's context, for its fold span to be a child of the RPC's span rather than of
    the store append's; None when tracing is off (nothing to parent, nothing to copy)."""
    return contextvars.copy_context() if telemetry.enabled() else None


class CallerTrace:
    """The caller's W3C trace context, read from the call's metadata at most once (a stream's
    messages share their call's), for the records of an append that carry none."""

    __slots__ = ("_context", "_parent", "_read")

    def __init__(self, context: Any) -> None:
        self._context = context
        self._parent: tuple[str, str] | None = None
        self._read = False

    def for_records(self, records: Sequence[pb.Record]) -> dict[str, str] | None:
        if all(r.trace.trace_id for r in records):
            return None  # every record is stamped: the metadata is not even looked at
        if not self._read:
            self._parent, self._read = telemetry.incoming_trace(self._context), True
        parent = self._parent
        return {"trace_id": parent[0], "span_id": parent[1]} if parent else None


@dataclass(slots=True)
class StreamMessage:
    """One AppendStream message as queued: its appends' tickets (with the bytes each holds
    against the peer's budget) and, when one of its appends was refused, the refusal that
    ends the stream after the acks of the ones before it."""

    batched: bool
    """Sent as ``appends`` (answered as ``responses``), not as ``append``."""
    queued: list[tuple[Ticket, contextlib.ExitStack]] = field(default_factory=list)
    refusal: Exception | None = None

    async def answer(
        self, held: set[contextlib.ExitStack]
    ) -> tuple[pb.AppendStreamResponse | None, Exception | None]:
        """The message's answer once its appends are durable (their bytes given back to the
        budget), covering the appends before the first failure; and that failure, if any."""
        answers: list[pb.AppendResponse] = []
        failure = self.refusal
        for ticket, bytes_held in self.queued:
            try:
                results = await ticket.durable()
            except Exception as exc:  # a failed write: it voided what follows
                failure = exc
                break
            bytes_held.close()
            held.discard(bytes_held)
            answers.append(pb.AppendResponse(acks=[ack_pb(r) for r in results]))
        if not answers:
            return None, failure
        if self.batched:
            return pb.AppendStreamResponse(responses=answers), failure
        return pb.AppendStreamResponse(response=answers[0]), failure


def stream_appends(req: pb.AppendStreamRequest) -> Sequence[pb.AppendRequest]:
    """The appends of one AppendStream message, in order: ``append`` or ``appends``
    (docs/protocol.md#coalesced-stream-messages)."""
    if not req.appends:
        return (req.append,)
    if req.HasField("append"):
        raise InvalidRequest(
            "an AppendStream message sets both append and appends; nothing of it was written. "
            "Put every append of the message in appends (or send it alone in append)",
            metadata={"field": "append"},
        )
    return req.appends
