"""Lossless conversion between records / folded state and their protobuf messages.

``payload_from_pb`` defines the *normal form* of every payload (which optional keys are
present), so a record that crosses the API and comes back is byte-identical:

* meta: ``labels`` and ``lineage`` only when set;
* assistant: ``usage`` always carries all four counters;
* tool_result: ``remote`` always present;
* rebase: ``pages`` (message page references), ``checkpoint_id``, ``checkpoint_hash``,
  ``covered`` only when set;
* terminal: ``message`` always present; envelope ``trace`` only when set;
* state: a deletion is ``namespace``, ``key`` (only when set) and ``deleted``; a value is
  ``namespace``, ``key``, ``type`` and either ``data`` (base64 of the bytes, even when empty)
  or ``sha256`` and ``size`` (an attachment).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from journald_proto import journal_pb2 as pb

from journald.core.errors import InvalidRecord, VersionUnsupported
from journald.core.fingerprint import Fingerprint
from journald.core.fold import Message, Pending, RunState
from journald.core.governance import GovernanceReport
from journald.core.pages import PageRef, page_refs
from journald.core.rebase_chunks import chunk_refs
from journald.core.records import (
    KINDS,
    TYPE_OF,
    Record,
    canonical_json,
    parse_json,
    utc_ts_of,
)
from journald.writer.gate import Incoming

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


def _json_list(data: bytes, field: str) -> list[Any]:
    if not data:
        return []
    value = parse_json(data, field)
    if not isinstance(value, list):
        raise InvalidRecord(
            f"field {field}: must be a JSON array of content blocks", metadata={"field": field}
        )
    return value


def message_to_pb(m: Mapping[str, Any]) -> pb.Message:
    return pb.Message(role=m["role"], content_json=canonical_json(m["content"]))


def message_from_pb(m: pb.Message, field: str = "message") -> Message:
    return {"role": m.role, "content": _json_list(m.content_json, f"{field}.content_json")}


def page_ref_to_pb(ref: PageRef) -> pb.PageRef:
    return pb.PageRef(sha256=ref.sha256, count=ref.count, size=ref.size)


def page_ref_from_pb(ref: pb.PageRef) -> PageRef:
    return PageRef(ref.sha256, ref.count, ref.size)


def fingerprint_to_pb(fp: Fingerprint) -> pb.Fingerprint:
    return pb.Fingerprint(**fp.as_json())


def fingerprint_from_pb(fp: pb.Fingerprint) -> Fingerprint:
    return Fingerprint(
        fp.provider,
        fp.model,
        fp.system_prompt_sha256,
        fp.tools_sha256,
        fp.thinking,
        fp.max_tokens,
        fp.max_iterations,
    )


def lineage_from_pb(lin: pb.Lineage) -> dict[str, Any]:
    out: dict[str, Any] = {"forked_from_run_id": lin.forked_from_run_id}
    if lin.forked_from_checkpoint_id:
        out["forked_from_checkpoint_id"] = lin.forked_from_checkpoint_id
    out["forked_at_seq"] = lin.forked_at_seq
    return out


def lineage_to_pb(lin: Mapping[str, Any] | None) -> pb.Lineage | None:
    if not lin:
        return None
    return pb.Lineage(
        forked_from_run_id=lin.get("forked_from_run_id", ""),
        forked_from_checkpoint_id=lin.get("forked_from_checkpoint_id", ""),
        forked_at_seq=lin.get("forked_at_seq", 0),
    )


def payload_from_pb(rec: pb.Record) -> tuple[str, dict[str, Any]]:
    """The payload kind and its normal-form JSON."""
    kind = rec.WhichOneof("payload")
    if kind is None:
        raise InvalidRecord(
            f"field payload: a record needs exactly one payload ({', '.join(KINDS)})",
            metadata={"field": "payload"},
        )
    if rec.type and rec.type != TYPE_OF[kind]:
        raise InvalidRecord(
            f"field type: {rec.type!r} does not match the payload ({kind})",
            metadata={"field": "type"},
        )
    out: dict[str, Any]
    if kind == "meta":
        m = rec.meta
        out = {
            "run_id": m.run_id,
            "created": utc_ts_of(m.created, "meta.created"),
            "fingerprint": fingerprint_from_pb(m.fingerprint).as_json(),
            "prompt": _json_list(m.prompt_json, "meta.prompt_json"),
            "interactive": m.interactive,
        }
        if m.labels:
            out["labels"] = dict(m.labels)
        if m.HasField("lineage"):
            out["lineage"] = lineage_from_pb(m.lineage)
    elif kind == "assistant":
        a = rec.assistant
        out = {
            "message": message_from_pb(a.message, "assistant.message"),
            "iteration": a.iteration,
            "stop_reason": a.stop_reason,
            "usage": {k: getattr(a.usage, k) for k in USAGE_KEYS},
        }
    elif kind == "tool_result":
        t = rec.tool_result
        out = {
            "tool_use_id": t.tool_use_id,
            "content": _json_list(t.content_json, "tool_result.content_json"),
            "is_error": t.is_error,
            "remote": t.remote,
        }
    elif kind == "user":
        out = {"content": _json_list(rec.user.content_json, "user.content_json")}
    elif kind == "rebase":
        r = rec.rebase
        out = {
            "reason": r.reason,
            "messages": [
                message_from_pb(m, f"rebase.messages[{i}]") for i, m in enumerate(r.messages)
            ],
        }
        if r.pages:
            out["pages"] = [page_ref_from_pb(p).as_json() for p in r.pages]
        if r.page_chunks:  # refused on Append (journald.server.paged_edits), as pages are
            out["page_chunks"] = [page_ref_from_pb(p).as_json() for p in r.page_chunks]
        if r.checkpoint_id:
            out["checkpoint_id"] = r.checkpoint_id
        if r.checkpoint_hash:
            out["checkpoint_hash"] = r.checkpoint_hash
        if r.HasField("covered"):
            out["covered"] = {"from_seq": r.covered.from_seq, "to_seq": r.covered.to_seq}
    elif kind == "state":
        out = state_payload_from_pb(rec.state)
    else:
        out = {"reason": rec.terminal.reason, "message": rec.terminal.message}
    return kind, out


def state_payload_from_pb(sp: pb.StatePayload) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": sp.namespace}
    if sp.deleted:
        if sp.key:
            out["key"] = sp.key
        out["deleted"] = True
        return out
    out["key"] = sp.key
    out["type"] = sp.type
    if sp.sha256:
        if sp.data:
            raise InvalidRecord(
                "field state: a value is either inline (data) or an attachment (sha256), not both",
                metadata={"field": "state.data"},
            )
        out["sha256"] = sp.sha256
        out["size"] = sp.size
    else:
        out["data"] = base64.b64encode(sp.data).decode("ascii")
    return out


def state_bytes(data: str) -> bytes:
    """The bytes of a stored inline value (its base64 text was checked by the schema)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""


def payload_to_pb(kind: str, p: Mapping[str, Any], rec: pb.Record) -> None:
    if kind == "meta":
        rec.meta.CopyFrom(
            pb.MetaPayload(
                run_id=p["run_id"],
                created=p.get("created", ""),
                fingerprint=fingerprint_to_pb(Fingerprint.from_json(p["fingerprint"])),
                prompt_json=canonical_json(p.get("prompt", [])),
                interactive=bool(p.get("interactive")),
                labels=p.get("labels", {}),
                lineage=lineage_to_pb(p.get("lineage")),
            )
        )
    elif kind == "assistant":
        usage = p.get("usage") or {}
        rec.assistant.CopyFrom(
            pb.AssistantPayload(
                message=message_to_pb(p["message"]),
                iteration=p.get("iteration", 0),
                stop_reason=p.get("stop_reason", ""),
                usage=pb.Usage(**{k: usage.get(k, 0) for k in USAGE_KEYS}),
            )
        )
    elif kind == "tool_result":
        rec.tool_result.CopyFrom(
            pb.ToolResultPayload(
                tool_use_id=p["tool_use_id"],
                content_json=canonical_json(p.get("content", [])),
                is_error=bool(p.get("is_error")),
                remote=bool(p.get("remote")),
            )
        )
    elif kind == "user":
        rec.user.CopyFrom(pb.UserPayload(content_json=canonical_json(p["content"])))
    elif kind == "rebase":
        cov = p.get("covered")
        rec.rebase.CopyFrom(
            pb.RebasePayload(
                reason=p["reason"],
                messages=[message_to_pb(m) for m in p["messages"]],
                pages=[page_ref_to_pb(r) for r in page_refs(p)],
                page_chunks=[page_ref_to_pb(r) for r in chunk_refs(p)],
                checkpoint_id=p.get("checkpoint_id", ""),
                checkpoint_hash=p.get("checkpoint_hash", ""),
                covered=pb.SeqRange(**cov) if cov else None,
            )
        )
    elif kind == "state":
        rec.state.CopyFrom(
            pb.StatePayload(
                namespace=p["namespace"],
                key=p.get("key", ""),
                type=p.get("type", ""),
                data=state_bytes(p.get("data", "")),
                sha256=p.get("sha256", ""),
                size=p.get("size", 0),
                deleted=bool(p.get("deleted")),
            )
        )
    else:
        rec.terminal.CopyFrom(pb.TerminalPayload(reason=p["reason"], message=p.get("message", "")))


def record_to_pb(r: Record, *, payload: bool = True) -> pb.Record:
    """A record's proto. ``payload=False``, as ``Watch`` sends a stored record: the envelope,
    the stored bytes (``canonical``) and their hash, and the payload oneof naming the kind
    with an empty message, since the payload is in ``canonical`` already
    (docs/protocol.md#reads); sending it twice doubled what every tail carried."""
    out = pb.Record(
        format_version=1, seq=r.seq, type=r.type, ts=r.ts, prev=r.prev, canonical=r.raw, hash=r.hash
    )
    if r.trace:
        out.trace.CopyFrom(
            pb.TraceContext(
                trace_id=r.trace.get("trace_id", ""), span_id=r.trace.get("span_id", "")
            )
        )
    if payload:
        payload_to_pb(r.kind, r.payload, out)
    else:
        getattr(out, r.kind).SetInParent()
    return out


def incoming_from_pb(rec: pb.Record, *, index: int = -1, ts: str | None = None) -> Incoming:
    """A received record decoded once into its normal form, not yet linked or encoded (the
    run writer links it onto the chain and encodes it once); ``ts`` overrides (the daemon's
    clock for a record sent without one)."""
    if rec.format_version not in (0, 1):
        raise VersionUnsupported(
            f"record format version {rec.format_version} is not supported (this daemon speaks "
            "version 1); upgrade the daemon or the client",
            metadata={"version": rec.format_version},
        )
    kind, payload = payload_from_pb(rec)
    trace = (
        {"trace_id": rec.trace.trace_id, "span_id": rec.trace.span_id}
        if rec.HasField("trace") and rec.trace.trace_id
        else None
    )
    return Incoming(
        rec.seq, kind, payload, utc_ts_of(ts if ts is not None else rec.ts, "ts"), trace, index
    )


def record_from_pb(rec: pb.Record, *, prev: str | None = None, ts: str | None = None) -> Record:
    """Build a record from its proto; ``prev``/``ts`` override (the daemon fills them)."""
    return incoming_from_pb(rec, ts=ts).link(prev if prev is not None else rec.prev, None)


def state_to_pb(st: RunState, *, messages: bool = True) -> pb.RunState:
    """The state as sent; ``messages=False`` leaves the committed messages out (only their
    count), for a caller that omits them or adds a window of them
    (``journald.server.message_window``)."""
    c = st.counters
    out = pb.RunState(
        run_id=st.run_id,
        interactive=st.interactive,
        messages=[message_to_pb(m) for m in st.messages] if messages else [],
        messages_total=len(st.messages),
        counters=pb.Counters(
            llm_calls=c.llm_calls,
            tool_calls=c.tool_calls,
            remote_tool_calls=c.remote_tool_calls,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            cache_read_tokens=c.cache_read_tokens,
            cache_creation_tokens=c.cache_creation_tokens,
        ),
        next_iteration=st.next_iteration,
        last_stop_reason=st.last_stop_reason,
        terminal_is_last=st.terminal_is_last,
        last_seq=st.last_seq,
        last_hash=st.last_hash,
        resume_at_input_boundary=st.resume_at_input_boundary,
        anomalies=[pb.Anomaly(seq=a.seq, kind=a.kind, detail=a.detail) for a in st.anomalies],
        labels=st.labels,
        prompt_json=canonical_json(st.prompt),
        state=[
            pb.StateEntry(
                namespace=ns,
                key=key,
                type=v.type,
                data=state_bytes(v.data) if v.data else b"",
                sha256=v.sha256,
                size=v.size,
                seq=v.seq,
            )
            for ns, key, v in st.state_entries()
        ],
    )
    if st.fingerprint is not None:
        out.fingerprint.CopyFrom(fingerprint_to_pb(st.fingerprint))
    lin = lineage_to_pb(st.lineage)
    if lin is not None:
        out.lineage.CopyFrom(lin)
    if st.terminal is not None:
        out.terminal.CopyFrom(
            pb.TerminalPayload(
                reason=str(st.terminal.get("reason", "")),
                message=str(st.terminal.get("message", "")),
            )
        )
    if st.pending is not None:
        out.pending.CopyFrom(pending_to_pb(st.pending))
    return out


def pending_to_pb(p: Pending) -> pb.PendingTurn:
    return pb.PendingTurn(
        message=message_to_pb(p.message),
        iteration=p.iteration,
        stop_reason=p.stop_reason,
        results=[
            pb.PendingResult(
                tool_use_id=r.tool_use_id,
                content_json=canonical_json(r.content),
                is_error=r.is_error,
                seq=r.seq,
            )
            for r in p.results
        ],
        answered_ids=p.answered_ids,
        unanswered=[pb.ToolCall(id=c.id, name=c.name, input_json=c.input) for c in p.unanswered],
        seq=p.seq,
    )


def governance_to_pb(rep: GovernanceReport) -> pb.GovernanceReport:
    return pb.GovernanceReport(
        synthesized_results=rep.synthesized_results,
        dropped_messages=rep.dropped_messages,
        dropped_blocks=rep.dropped_blocks,
    )


def messages_to_pb(msgs: Sequence[Mapping[str, Any]]) -> list[pb.Message]:
    return [message_to_pb(m) for m in msgs]
