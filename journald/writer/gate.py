"""The one gate every record the daemon writes passes (docs/design.md#the-run-writer).

A client's append, the meta record of an ``Open`` or a fork, the daemon's rebases (compaction,
restore, fork, a writer's ``edit``), a fork's state copies and a recovery's ``quarantine``
rebase all pass ``Gate``: the daemon's size limit (``--max-record-bytes``) and the record
schema (``journald.core.schema``) in ``record``, the batch's seq order in ``batch``, and the
seq and new-vs-retry decision (``journald.core.records.plan_batch``) in ``plan``. Nothing
else in the daemon decides them; the fold keeps its own checks only as its defence when it
reads stored records (``journald.core.fold``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.errors import InvalidArgumentError, InvalidRecord
from journald.core.records import Record, check_batch, make_record, plain_json, plan_batch
from journald.core.schema import validate_record

Trace = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Incoming:
    """A record to write, in normal form but not yet linked: what a client sent (decoded by
    the RPC part, ``index`` its place in the append) or what the daemon built (``built``)."""

    seq: int
    kind: str
    payload: Mapping[str, Any]
    ts: str
    trace: Trace | None
    index: int = -1
    built: Record | None = None

    @classmethod
    def of(cls, rec: Record) -> Incoming:
        return cls(rec.seq, rec.kind, rec.payload, rec.ts, rec.trace, built=rec)

    def link(self, prev: str, trace: Trace | None, plain: bool | None = None) -> Record:
        """The record linked onto ``prev``, stamped with ``trace`` if it carries none; a
        record the daemon built is reused when that changes nothing (no second encode).
        ``plain``: ``plain_json`` of the payload, if asked already (``make_record``)."""
        stamped = self.trace if self.trace is not None else trace
        b = self.built
        if b is not None and b.prev == prev and b.trace == stamped:
            return b
        return make_record(self.seq, self.kind, self.payload, prev, self.ts, stamped, plain)


def at_index(err: InvalidArgumentError, index: int, seq: int) -> InvalidArgumentError:
    """Name the record of an append a refusal is about (``records[i] (seq N)``)."""
    if index >= 0:
        err.message = f"records[{index}] (seq {seq}): {err.message}"
        if isinstance(err, InvalidRecord):
            err.metadata.setdefault("seq", str(seq))
            err.metadata.setdefault("field", f"records[{index}]")
    return err


def locate(err: InvalidRecord, run_id: str, seq: int, field: str) -> InvalidRecord:
    """Give a refusal the ``run_id``, ``seq`` and ``field`` every ``invalid_record`` carries
    (docs/protocol.md#error-codes), keeping what the check that raised it already named."""
    for key, value in (("run_id", run_id), ("seq", str(seq)), ("field", field)):
        err.metadata.setdefault(key, value)
    return err


class Gate:
    """Schema, size limit, seq order and new-vs-retry: decided here for every record."""

    def __init__(self, max_record_bytes: int) -> None:
        self.max_record_bytes = max_record_bytes

    def record(self, rec: Record, plain: bool = False) -> None:
        """The daemon's size limit and the record schema, before anything is written.
        ``plain``: ``plain_json(rec.payload)`` answered yes (the schema's number check)."""
        if len(rec.raw) > self.max_record_bytes:
            advice = (
                "journal the output as an attachment: tool_result(..., as_attachment=True) "
                "in the Python, Go and TS clients (PutAttachment, then a result holding its "
                "attachment block; up to 8 MiB), or keep larger output outside the journal "
                "and journal a reference to it"
                if rec.kind == "tool_result"
                else "store large content as an attachment (PutAttachment) and journal its "
                "attachment block instead"
            )
            raise InvalidRecord(
                f"record seq {rec.seq} ({rec.kind}) is {len(rec.raw)} bytes; the daemon's "
                f"limit is {self.max_record_bytes} bytes (--max-record-bytes): {advice}",
                metadata={"seq": rec.seq, "field": "record"},
            )
        validate_record(rec, plain)

    def batch(self, run_id: str, items: Sequence[Incoming]) -> None:
        """A batch's seqs follow one another (checked before it waits for its turn)."""
        check_batch(run_id, [i.seq for i in items])

    def plan(
        self,
        run_id: str,
        at: int,
        prev: str,
        stored: Mapping[int, Record],
        items: Sequence[Incoming],
        trace: Trace | None,
    ) -> tuple[list[Record], list[Record]]:
        """(the stored records the batch's retries match, its new records linked after
        ``prev``), each record linked and checked once. ``trace``: the call's, stamped into
        new records without one; a retry without one takes the stored record's, so its
        bytes match."""

        def build(i: int, link_to: str, have: Record | None) -> Record:
            item = items[i]
            if have is not None:
                stamp = have.trace if trace is not None and item.trace is None else None
            else:
                stamp = trace
            try:
                # one walk of the payload answers both the fast encoder and the schema's
                # number check (journald.core.records.plain_json); a record the daemon built
                # is mostly reused as it is, so it is not walked unless it is encoded again
                plain = plain_json(item.payload) if item.built is None else None
                rec = item.link(link_to, stamp, plain)
                self.record(rec, plain is True)
            except InvalidArgumentError as err:
                raise at_index(err, item.index, item.seq) from None
            return rec

        return plan_batch(run_id, at, prev, [i.seq for i in items], stored, build)
