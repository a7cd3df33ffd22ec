"""The fold: ``fold(records) -> RunState``, pure and deterministic (docs/design.md#fold).

Invariants of the result:

* ``messages`` is always a history a model API accepts: roles alternate and every tool_use
  is answered by a tool_result in the next user message. An in-flight tool batch never
  appears there: it is ``pending`` until its last call is answered, then the assistant
  message and one user message holding every result (in the order the model made the
  calls) are committed together.
* A user record holds only the newly typed blocks. When the conversation already ends on a
  user message (tool results, or earlier follow-ups) the fold merges the new blocks into it,
  exactly as a live agent builds its next request; otherwise it starts a user message.
  Consecutive assistant messages (a ``pause_turn`` continuation) merge the same way.
* ``messages`` is a ``MessageLog`` (``journald.core.message_log``): sealed pages then an open
  tail; the fold changes only the tail (appends and merges into the last message).
* A rebase replaces the messages with its own: its chunks and pages stay sealed in the new
  log (``rebase_chunks.rebase_log``: no page is read but the last one or two when its inline
  tail is shorter than two messages and not one assistant message), its inline messages are
  the tail; counters stay
  cumulative. A rebase with
  reason ``quarantine`` (written by recovery after moving damaged records out) is also kept
  as an anomaly, and every Open of the run warns about it.
* A state record (framework state: LangGraph checkpoints, agent session items) never touches
  the conversation: the fold keeps the latest value of each (namespace, key) in ``state``, and
  a deletion drops one key or a whole namespace. A rebase leaves state alone.
* Everything else (counters, next iteration, resume boundary) is derived, never stored.

Refused as ``store_corrupted`` naming the seq: a first record that is not meta, a second
meta, a non-increasing seq, a tool_result before any assistant, a malformed payload.
Tolerated and reported as anomalies: results for unknown tool ids, duplicate results
(counted once), a turn abandoned with unanswered calls (closed with synthetic errors).

``fold(more, start=state)`` continues from an earlier state without mutating it, which is
how the daemon keeps a run's state current on every append.

``answered_ever`` may be sealed in chunks the caller has not loaded
(``journald.core.answered``): asking it about a duplicate or unknown result then raises
``AnsweredNotLoaded`` before the record changed anything, so the caller loads the chunks and
folds that record again.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from journald.core.answered import AnsweredIds
from journald.core.errors import InvalidRecord, StoreCorrupted
from journald.core.fingerprint import Fingerprint
from journald.core.message_log import MessageLog
from journald.core.pages import PageResolver
from journald.core.rebase_chunks import log_messages, rebase_log
from journald.core.records import GENESIS, Record

Message = dict[str, Any]
Block = dict[str, Any]
QUARANTINE = "quarantine"  # the rebase reason recovery writes (docs/design.md#recovery)
QUARANTINED = "records_quarantined"  # its anomaly and Open warning
ABANDONED_TEXT = (
    "journald: this tool call was never answered (the writer stopped before journaling its "
    "result); its outcome is unknown. Re-check any state it may have changed before retrying."
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: str


@dataclass(frozen=True, slots=True)
class PendingResult:
    tool_use_id: str
    content: list[Block]
    is_error: bool
    seq: int


@dataclass(slots=True)
class Pending:
    """The trailing assistant turn whose tool calls are not all answered."""

    message: Message
    iteration: int
    stop_reason: str
    seq: int
    calls: list[ToolCall]
    results: list[PendingResult] = field(default_factory=list)

    @property
    def answered_ids(self) -> list[str]:
        return [r.tool_use_id for r in self.results]

    @property
    def unanswered(self) -> list[ToolCall]:
        done = set(self.answered_ids)
        return [c for c in self.calls if c.id not in done]

    def copy(self) -> Pending:
        return replace(self, calls=list(self.calls), results=list(self.results))


@dataclass(slots=True)
class Counters:
    llm_calls: int = 0
    tool_calls: int = 0
    remote_tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Anomaly:
    seq: int
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class StateValue:
    """The latest value of one (namespace, key): inline ``data`` (base64 text, as stored) or
    the attachment ``sha256`` and ``size``."""

    seq: int
    type: str
    data: str = ""
    sha256: str = ""
    size: int = 0


@dataclass(slots=True)
class RunState:
    run_id: str = ""
    fingerprint: Fingerprint | None = None
    interactive: bool = False
    created: str = ""
    prompt: list[Block] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    lineage: dict[str, Any] | None = None
    # sealed pages plus an open tail (``journald.core.message_log``): the fold changes the tail
    messages: MessageLog = field(default_factory=MessageLog)
    pending: Pending | None = None
    counters: Counters = field(default_factory=Counters)
    next_iteration: int = 1
    last_stop_reason: str = ""
    terminal: dict[str, Any] | None = None
    terminal_is_last: bool = False
    last_seq: int = 0
    last_hash: str = GENESIS
    last_ts: str = ""
    anomalies: list[Anomaly] = field(default_factory=list)
    # tool_use ids answered anywhere in the run: a late copy of an answer to an earlier turn
    # is a duplicate, not an unknown id (an id reused by a later turn is answered anew); sealed
    # chunks plus a tail (``journald.core.answered``), so it is not what a snapshot costs
    answered_ever: AnsweredIds = field(default_factory=AnsweredIds)
    # framework state: namespace -> key -> latest value (keys in the order they were written)
    state: dict[str, dict[str, StateValue]] = field(default_factory=dict)

    @property
    def resume_at_input_boundary(self) -> bool:
        return (
            self.interactive
            and self.pending is None
            and bool(self.messages)
            and self.messages[-1]["role"] == "assistant"
            and self.last_stop_reason != "pause_turn"
        )

    @property
    def completed(self) -> bool:
        return self.terminal_is_last and (self.terminal or {}).get("reason") == "completed"

    @property
    def status(self) -> str:
        if self.terminal_is_last and self.terminal is not None:
            return str(self.terminal.get("reason", "ended"))
        return "open"

    def copy(self) -> RunState:
        # Message dicts are never mutated in place (merges build new dicts), so a copy of
        # the tail (the pages are frozen) is enough for a continuation to leave this
        # state untouched.
        return replace(
            self,
            prompt=list(self.prompt),
            labels=dict(self.labels),
            messages=self.messages.copy(),
            pending=self.pending.copy() if self.pending else None,
            counters=replace(self.counters),
            anomalies=list(self.anomalies),
            answered_ever=self.answered_ever.copy(),
            state={ns: dict(values) for ns, values in self.state.items()},
        )

    def state_entries(self) -> list[tuple[str, str, StateValue]]:
        """Every live (namespace, key, value), oldest write first."""
        out = [(ns, k, v) for ns, values in self.state.items() for k, v in values.items()]
        out.sort(key=lambda e: e[2].seq)
        return out


def tool_calls_of(message: Mapping[str, Any]) -> list[ToolCall]:
    return [
        ToolCall(str(b["id"]), str(b.get("name", "")), str(b.get("input", "")))
        for b in message.get("content", [])
        if b.get("type") == "tool_use"
    ]


def result_block(tool_use_id: str, content: Sequence[Block], is_error: bool) -> Block:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": list(content),
        "is_error": is_error,
    }


def abandoned_result(tool_use_id: str) -> Block:
    return result_block(tool_use_id, [{"type": "text", "text": ABANDONED_TEXT}], True)


def append_message(
    messages: list[Message] | MessageLog, role: str, content: Sequence[Block]
) -> None:
    """Append, merging into the last message when it has the same role (a new dict)."""
    if messages and messages[-1]["role"] == role:
        last = messages[-1]
        messages[-1] = {**last, "content": [*last["content"], *content]}
    else:
        messages.append({"role": role, "content": list(content)})


def pending_blocks(pending: Pending) -> list[Block]:
    """Result blocks of a pending turn in call order, synthetic errors for unanswered calls."""
    by_id = {r.tool_use_id: r for r in pending.results}
    out = []
    for call in pending.calls:
        r = by_id.get(call.id)
        out.append(result_block(call.id, r.content, r.is_error) if r else abandoned_result(call.id))
    return out


def fold(
    records: Iterable[Record],
    start: RunState | None = None,
    pages: PageResolver | None = None,
) -> RunState:
    """Fold records into a run state, continuing from ``start`` (left untouched) if given.
    ``pages`` reads the message pages a paged rebase references (``journald.core.pages``)."""
    st = start.copy() if start is not None else RunState()
    for rec in records:
        _apply(st, rec, pages)
    return st


def fold_into(
    state: RunState, records: Iterable[Record], pages: PageResolver | None = None
) -> RunState:
    """Fold records into ``state`` in place (the daemon's cached state, after a durable append)."""
    for rec in records:
        _apply(state, rec, pages)
    return state


def _corrupt(rec: Record, what: str) -> StoreCorrupted:
    return StoreCorrupted(
        f"record seq {rec.seq} ({rec.kind}) {what}; the journal cannot be folded: run "
        "`journald verify` and restore from a checkpoint or backup",
        metadata={"seq": rec.seq, "kind": rec.kind},
    )


def _need(ok: bool, rec: Record, what: str) -> None:
    if not ok:
        raise _corrupt(rec, what)


def _blocks(value: object, rec: Record, name: str) -> list[Block]:
    _need(
        isinstance(value, list)
        and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value),
        rec,
        f"has a malformed {name}: expected a list of content blocks",
    )
    assert isinstance(value, list)
    return value


def _message(value: object, rec: Record, role: str) -> Message:
    _need(
        isinstance(value, dict) and value.get("role") == role,
        rec,
        f"has a malformed message: expected role {role!r}",
    )
    assert isinstance(value, dict)
    _blocks(value.get("content"), rec, "message content")
    return value


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _close_abandoned(st: RunState, rec: Record) -> None:
    pending = st.pending
    if pending is None:
        return
    ids = [c.id for c in pending.unanswered]
    st.anomalies.append(
        Anomaly(
            rec.seq,
            "abandoned_tool_calls",
            f"tool calls {ids} of seq {pending.seq} were never answered; "
            "closed with synthetic error results",
        )
    )
    append_message(st.messages, "assistant", pending.message["content"])
    append_message(st.messages, "user", pending_blocks(pending))
    st.pending = None


def _apply(st: RunState, rec: Record, pages: PageResolver | None = None) -> None:
    p = rec.payload
    if st.last_seq == 0:
        _need(rec.kind == "meta", rec, "is the first record but not meta")
    else:
        _need(rec.seq > st.last_seq, rec, f"does not follow seq {st.last_seq} (non-increasing)")
        _need(rec.kind != "meta", rec, "is a second meta record")
    _need(isinstance(p, Mapping), rec, "has a payload that is not an object")
    if rec.kind == "meta":
        _need(
            isinstance(p.get("run_id"), str) and isinstance(p.get("fingerprint"), dict),
            rec,
            "lacks run_id or fingerprint",
        )
        _need(isinstance(p.get("labels") or {}, dict), rec, "has labels that are not an object")
        st.run_id = p["run_id"]
        try:
            st.fingerprint = Fingerprint.from_json(p["fingerprint"])
        except InvalidRecord as exc:
            raise _corrupt(rec, f"has a malformed fingerprint ({exc.message})") from exc
        st.interactive = bool(p.get("interactive", False))
        st.created = str(p.get("created", rec.ts))
        st.prompt = _blocks(p.get("prompt", []), rec, "prompt")
        st.labels = dict(p.get("labels") or {})
        st.lineage = p.get("lineage")
        if st.prompt:
            st.messages = MessageLog([{"role": "user", "content": list(st.prompt)}])
    elif rec.kind == "assistant":
        msg = _message(p.get("message"), rec, "assistant")
        _need(
            all(
                isinstance(b.get("id"), str) and b["id"]
                for b in msg["content"]
                if b["type"] == "tool_use"
            ),
            rec,
            "has a tool_use block without an id",
        )
        usage = p.get("usage") or {}
        _need(isinstance(usage, dict), rec, "has a usage that is not an object")
        _close_abandoned(st, rec)
        c = st.counters
        c.llm_calls += 1
        c.input_tokens += _count(usage.get("input_tokens"))
        c.output_tokens += _count(usage.get("output_tokens"))
        c.cache_read_tokens += _count(usage.get("cache_read_tokens"))
        c.cache_creation_tokens += _count(usage.get("cache_creation_tokens"))
        iteration = _count(p.get("iteration"))
        st.next_iteration = iteration + 1
        st.last_stop_reason = str(p.get("stop_reason", ""))
        calls = tool_calls_of(msg)
        if calls:
            st.pending = Pending(msg, iteration, st.last_stop_reason, rec.seq, calls)
        else:
            append_message(st.messages, "assistant", msg["content"])
    elif rec.kind == "tool_result":
        _need(st.counters.llm_calls > 0, rec, "comes before any assistant record")
        tid = p.get("tool_use_id")
        _need(isinstance(tid, str) and bool(tid), rec, "lacks tool_use_id")
        content = _blocks(p.get("content", []), rec, "result content")
        pending = st.pending
        # ids are unique per turn, not per run: providers and scripted models reuse
        # ``call_1`` in later turns, so an open call of the pending turn is answered even
        # when an earlier turn answered the same id
        if pending is not None and tid in {c.id for c in pending.unanswered}:
            st.answered_ever.add(tid)
            st.counters.tool_calls += 1
            st.counters.remote_tool_calls += 1 if p.get("remote") else 0
            pending.results.append(PendingResult(tid, content, bool(p.get("is_error")), rec.seq))
            if not pending.unanswered:
                append_message(st.messages, "assistant", pending.message["content"])
                append_message(st.messages, "user", pending_blocks(pending))
                st.pending = None
        elif tid in st.answered_ever:  # may raise AnsweredNotLoaded: nothing changed yet
            st.anomalies.append(
                Anomaly(
                    rec.seq,
                    "duplicate_result",
                    f"tool_use_id {tid} was already answered; counted once",
                )
            )
        else:
            st.anomalies.append(
                Anomaly(
                    rec.seq,
                    "unknown_tool_use_id",
                    f"no open tool call has id {tid}; result ignored",
                )
            )
    elif rec.kind == "user":
        content = _blocks(p.get("content"), rec, "content")
        _close_abandoned(st, rec)
        append_message(st.messages, "user", content)
    elif rec.kind == "rebase":
        try:
            # its pages stay sealed: only the last ones a short inline tail needs are read (a
            # missing page or chunk: store_corrupted)
            log = rebase_log(p, pages)
        except StoreCorrupted as exc:
            exc.metadata.setdefault("seq", str(rec.seq))
            raise
        _need(log is not None, rec, "lacks messages")
        assert log is not None
        # the open tail's messages only: a sealed page is content-addressed and was written
        # by the daemon (or an import) from messages it checked (docs/design.md#lazy-rebases)
        for m in log.tail:
            _need(
                isinstance(m, dict) and m.get("role") in ("user", "assistant"),
                rec,
                "holds a message without a user/assistant role",
            )
            _blocks(m.get("content"), rec, "message content")
        if st.pending is not None:
            st.anomalies.append(
                Anomaly(
                    rec.seq,
                    "pending_replaced",
                    f"the pending turn of seq {st.pending.seq} was replaced by a rebase",
                )
            )
        st.pending = None
        st.messages = log
        if p.get("reason") == QUARANTINE:
            st.anomalies.append(Anomaly(rec.seq, QUARANTINED, quarantine_note(rec.seq, p)))
    elif rec.kind == "terminal":
        _need(isinstance(p.get("reason"), str), rec, "lacks a reason")
        st.terminal = dict(p)
    elif rec.kind == "state":
        _apply_state(st, rec, p)
    st.terminal_is_last = rec.kind == "terminal"
    st.last_seq, st.last_hash, st.last_ts = rec.seq, rec.hash, rec.ts


def _apply_state(st: RunState, rec: Record, p: Mapping[str, Any]) -> None:
    ns, key = p.get("namespace"), p.get("key", "")
    _need(isinstance(ns, str) and bool(ns), rec, "lacks a namespace")
    _need(isinstance(key, str), rec, "has a key that is not a string")
    assert isinstance(ns, str)
    assert isinstance(key, str)
    if p.get("deleted"):
        if not key:
            st.state.pop(ns, None)
        elif ns in st.state:
            st.state[ns].pop(key, None)
            if not st.state[ns]:
                del st.state[ns]
        return
    vtype, data, sha = p.get("type"), p.get("data", ""), p.get("sha256", "")
    size = p.get("size", 0)
    _need(
        bool(key)
        and isinstance(vtype, str)
        and isinstance(data, str)
        and isinstance(sha, str)
        and type(size) is int,
        rec,
        "has a malformed value (needs key, type and data or sha256)",
    )
    assert isinstance(vtype, str)
    assert isinstance(data, str)
    assert isinstance(sha, str)
    values = st.state.setdefault(ns, {})
    values.pop(key, None)  # re-inserted: keys stay in the order of their latest write
    values[key] = StateValue(rec.seq, vtype, data, sha, size)


def quarantine_note(seq: int, payload: Mapping[str, Any]) -> str:
    covered = payload.get("covered")
    if not isinstance(covered, Mapping):  # a damaged rebase still folds; the note says less
        covered = {}
    first, last = covered.get("from_seq", 0), covered.get("to_seq", 0)
    span = f"seq {first}" if first == last else f"seqs {first}..{last}"
    return (
        f"damaged records ({span}) were moved out of the run to quarantine by recovery; the "
        f"conversation was rebuilt from the records that survived (rebase seq {seq}): check "
        "it before relying on what the missing records said or did"
    )


def rebuilt_after_quarantine(
    survivors: Iterable[Record], pages: PageResolver | None = None
) -> list[Message]:
    """The conversation a recovery records after moving damaged records out: the fold of the
    records that survived, with a turn left open closed by synthetic error results (its
    results may be among the damaged records, so their outcome is unknown)."""
    st = RunState()
    for rec in survivors:
        if rec.kind == "tool_result" and not st.counters.llm_calls:
            continue  # the assistant turn it answered is among the damaged records
        fold_into(st, (rec,), pages)
    msgs = log_messages(st.messages, pages)
    if st.pending is not None:
        append_message(msgs, "assistant", st.pending.message["content"])
        append_message(msgs, "user", pending_blocks(st.pending))
    return msgs


def resume_warnings(st: RunState) -> list[tuple[str, str]]:
    """Notices that travel with an Open (not refusals)."""
    out: list[tuple[str, str]] = [
        (QUARANTINED, a.detail) for a in st.anomalies if a.kind == QUARANTINED
    ]
    if st.pending is not None and st.pending.unanswered:
        ids = ", ".join(c.id for c in st.pending.unanswered)
        out.append(
            (
                "open_tool_calls",
                f"the last assistant turn (seq {st.pending.seq}) has unanswered tool calls "
                f"({ids}): run them or append an error result for each before the next "
                "model call",
            )
        )
    elif st.last_stop_reason == "pause_turn":
        out.append(
            (
                "paused_turn",
                "the run rests on a paused turn; the server-side state it depends on may "
                "have expired, so the next model call may need to start the turn over",
            )
        )
    return out
