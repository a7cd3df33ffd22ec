"""Plain dataclasses for what the daemon returns: folded state, acks, records, listings.

Messages are plain dicts ``{"role": ..., "content": [blocks]}``: exactly the shape a model
API accepts, ready to send.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from journald_client.fingerprint import Fingerprint

Block = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool_use block of an assistant turn."""

    id: str
    name: str
    input_json: str

    @property
    def input(self) -> Any:
        """The decoded input (``{}`` when the model produced none)."""
        return json.loads(self.input_json) if self.input_json else {}


@dataclass(frozen=True, slots=True)
class PendingResult:
    tool_use_id: str
    content: list[Block]
    is_error: bool
    seq: int


@dataclass(frozen=True, slots=True)
class PendingTurn:
    """The trailing assistant turn whose tool calls are not all answered."""

    message: Message
    iteration: int
    stop_reason: str
    results: list[PendingResult]
    answered_ids: list[str]
    unanswered: list[ToolCall]
    seq: int

    @property
    def calls(self) -> list[ToolCall]:
        """Every tool call of the turn, in the order the model made them."""
        return [
            ToolCall(str(b.get("id", "")), str(b.get("name", "")), str(b.get("input", "")))
            for b in self.message.get("content", [])
            if b.get("type") == "tool_use"
        ]


@dataclass(frozen=True, slots=True)
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
class LeaseWarning:
    """A notice that travels with an open (``open_tool_calls``, ``paused_turn``, ...)."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Terminal:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class StateEntry:
    """The latest value of one (namespace, key) of framework state: inline ``data``, or the
    SHA-256 of the run attachment that holds it (``Client.get_attachment``)."""

    namespace: str
    key: str
    type: str
    data: bytes
    sha256: str
    size: int
    seq: int

    @property
    def inline(self) -> bool:
        return not self.sha256


@dataclass(frozen=True, slots=True)
class RunState:
    """The daemon's fold of a run (docs/design.md#fold)."""

    run_id: str
    fingerprint: Fingerprint | None
    interactive: bool
    messages: list[Message]
    pending: PendingTurn | None
    counters: Counters
    next_iteration: int
    last_stop_reason: str
    terminal: Terminal | None
    terminal_is_last: bool
    last_seq: int
    last_hash: str
    resume_at_input_boundary: bool
    anomalies: list[Anomaly] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    prompt: list[Block] = field(default_factory=list)
    lineage: dict[str, Any] | None = None
    warnings: list[LeaseWarning] = field(default_factory=list)
    state: list[StateEntry] = field(default_factory=list)
    """Framework state (LangGraph checkpoints, session items): every live entry, oldest
    write first."""

    @property
    def completed(self) -> bool:
        return (
            self.terminal_is_last
            and self.terminal is not None
            and (self.terminal.reason == "completed")
        )


@dataclass(frozen=True, slots=True)
class GovernedView:
    """The pairing-governed message list (sendable after an interruption) and its report."""

    messages: list[Message]
    synthesized_results: int
    dropped_messages: int
    dropped_blocks: int
    state: RunState


@dataclass(frozen=True, slots=True)
class Ack:
    """One durable record: its seq, hash, durability level, and whether it was a retry."""

    seq: int
    hash: str
    durability: str
    duplicate: bool


PAGE_FORMAT = "journald-page/1"
PAGEREFS_FORMAT = "journald-pagerefs/1"
REFS_PER_CHUNK = 128


@dataclass(frozen=True, slots=True)
class PageRef:
    """One message page a paged rebase references (docs/protocol.md#message-pages): the
    page's SHA-256 address in the run's attachment store, how many messages it holds and
    its size in bytes. ``GetAttachment(run_id, sha256)`` returns the page's bytes."""

    sha256: str
    count: int
    size: int

    def messages(self, data: bytes) -> list[Message]:
        """The messages of this page from its bytes (``Client.get_attachment``), checked
        against the reference; ``ValueError`` when they do not match it."""
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise ValueError(f"message page {self.sha256}: the bytes do not match its reference")
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("format") != PAGE_FORMAT:
            raise ValueError(f"message page {self.sha256}: not a {PAGE_FORMAT} page")
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or len(msgs) != self.count:
            raise ValueError(f"message page {self.sha256}: does not hold {self.count} messages")
        return msgs

    def page_refs(self, data: bytes) -> tuple[PageRef, ...]:
        """The page references of this page-reference chunk (a rebase's ``page_chunks``)
        from its bytes, checked against the reference (address, size, format, 128
        references whose pages hold ``count`` messages); ``ValueError`` when they do not."""
        what = f"page-reference chunk {self.sha256}"
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise ValueError(f"{what}: the bytes do not match its reference")
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("format") != PAGEREFS_FORMAT:
            raise ValueError(f"{what}: not a {PAGEREFS_FORMAT} chunk")
        raw = obj.get("refs")
        if not isinstance(raw, list) or len(raw) != REFS_PER_CHUNK:
            raise ValueError(f"{what}: does not hold {REFS_PER_CHUNK} page references")
        refs = _page_refs(raw)
        if sum(r.count for r in refs) != self.count:
            raise ValueError(f"{what}: its pages do not hold {self.count} messages")
        return refs


def _page_refs(raw: object) -> tuple[PageRef, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(PageRef(str(r["sha256"]), int(r["count"]), int(r["size"])) for r in raw)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """A stored record as Load and Watch return it (``canonical`` = the exact bytes)."""

    seq: int
    kind: str
    ts: str
    prev: str
    hash: str
    canonical: bytes
    trace: dict[str, str] | None
    payload: dict[str, Any]

    @property
    def pages(self) -> tuple[PageRef, ...]:
        """A paged rebase's message pages, in order: its conversation is their messages,
        then ``payload["messages"]`` (the tail). Empty for an inline rebase and any other
        record. To read the whole conversation as of the rebase, fetch each page
        (``PageRef.messages(client.get_attachment(run_id, ref.sha256))``); ``History`` and
        ``fold`` return a run's current conversation with pages resolved."""
        return _page_refs(self.payload.get("pages") if self.kind == "rebase" else None)

    @property
    def page_chunks(self) -> tuple[PageRef, ...]:
        """A rebase of 128 pages or more names its pages through chunks of 128 page
        references (docs/protocol.md#page-reference-chunks), in order: its conversation is
        every chunk's pages' messages, then ``pages``', then the tail. Each chunk's
        ``count`` is the number of messages its pages hold. Empty otherwise."""
        return _page_refs(self.payload.get("page_chunks") if self.kind == "rebase" else None)

    @property
    def paged_messages(self) -> int:
        """How many messages the chunks and pages hold, before the inline tail (0 when not
        paged); no chunk is read."""
        return sum(ref.count for ref in (*self.page_chunks, *self.pages))

    def all_pages(self, fetch: Callable[[str], bytes]) -> tuple[PageRef, ...]:
        """Every page of a rebase's conversation, in order: each chunk's pages (the chunk
        read with ``fetch(sha256)``, e.g. ``lambda d: client.get_attachment(run_id, d)``,
        and checked), then ``pages``."""
        out: list[PageRef] = []
        for chunk in self.page_chunks:
            out.extend(chunk.page_refs(fetch(chunk.sha256)))
        return (*out, *self.pages)

    def conversation(self, fetch: Callable[[str], bytes]) -> list[Message]:
        """The whole conversation a rebase set, its chunks and pages read with
        ``fetch(sha256)`` and checked (``ValueError`` when one does not match its
        reference): chunks first, then pages, then the inline tail."""
        out: list[Message] = []
        for ref in self.all_pages(fetch):
            out.extend(ref.messages(fetch(ref.sha256)))
        tail = self.payload.get("messages") if self.kind == "rebase" else None
        out.extend(tail if isinstance(tail, list) else [])
        return out


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds a run's writer lease, and since when (RFC 3339 UTC)."""

    name: str
    pid: int
    host: str
    cwd: str
    since: str


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A listing row. ``status``: ``open`` (not ended, no writer), ``held`` (a writer holds
    the lease), the reason of the terminal record that ends the run (``completed``,
    ``suspended``, ``error``, ``budget``, ``max_iterations``), or ``corrupted`` (its stored
    bytes are damaged, as the listing or the daemon's background scrubber found: ``error``
    says where; opening it is refused with ``StoreCorrupted``)."""

    run_id: str
    created: str
    updated: str
    model: str
    prompt_preview: str
    status: str
    record_count: int
    bytes: int
    last_seq: int
    holder: LeaseHolder | None = None  # set while a writer holds the lease
    labels: dict[str, str] = field(default_factory=dict)
    pending_calls: int | None = None  # known for held runs (else ask History, limit 0)
    error: str = ""
    """Why the run cannot be read when ``status`` is ``corrupted`` (else empty)."""


@dataclass(frozen=True, slots=True)
class VerifyResult:
    records: int
    last_seq: int
    last_hash: str
    segments: int


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A damaged line recovery moved out of a run: where it was, its hash, where it went."""

    file: str
    line: int
    seq: int
    sha256: str
    bytes: int
    evidence: str
    reason: str


@dataclass(frozen=True, slots=True)
class RecoverResult:
    """What ``recover`` did: ``quarantined`` records moved to ``directory``; the seqs
    ``hole_from..hole_to`` are no longer in the run and the rebase at ``rebase_seq`` records
    that (0: the run had no damage, nothing changed)."""

    run_id: str
    quarantined: int
    records: list[QuarantinedRecord]
    directory: str
    hole_from: int
    hole_to: int
    rebase_seq: int
    repaired: str
    last_seq: int


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool function may return to ``complete_pending`` to flag an error itself."""

    content: str | list[Block]
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointMeta:
    """A checkpoint: a read-only copy of a run's folded conversation at ``seq``.
    ``trigger`` is manual, pre_compaction, pre_restore, pre_prune or import."""

    checkpoint_id: str
    run_id: str
    trigger: str
    label: str
    seq: int
    message_count: int
    created: str
    model: str
    hash: str
    cwd: str


@dataclass(frozen=True, slots=True)
class CheckpointChange:
    """A checkpoint event of a Watch (``Watch.events()``): ``kind`` is created, deleted or
    evicted; ``checkpoint`` the checkpoint concerned."""

    kind: str
    checkpoint: CheckpointMeta


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore did: message counts before and after, the pre_restore checkpoint (if
    taken), the rebase record's ack, and notices such as ``cwd_mismatch``."""

    from_messages: int
    to_messages: int
    pre_restore_checkpoint_id: str
    ack: Ack
    warnings: list[LeaseWarning]


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What a compaction did. ``status``: compacted, rejected (nothing written; ``reason``
    says why, e.g. turn_running, nothing_to_compact) or failed (``reason`` says why; nothing
    is kept, the pre_compaction checkpoint included). ``removed_range`` and ``ack`` are set
    when compacted."""

    status: str
    reason: str
    checkpoint_id: str
    removed_range: tuple[int, int] | None
    ack: Ack | None

    @property
    def compacted(self) -> bool:
        return self.status == "compacted"


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One self-paired page of the folded conversation: ``messages`` start at the (aligned)
    ``offset``; the next page starts at ``next_offset`` (== ``total`` at the end). A Watch
    from ``last_seq + 1`` follows on from what the page shows."""

    messages: list[Message]
    total: int
    offset: int
    next_offset: int
    last_seq: int = 0  # the page reflects the records up to this seq
    pending: PendingTurn | None = None  # the open turn (never part of ``messages``)
    at_index: int = 0  # a page by seq or time: the message the record folded into
    at_seq: int = 0  # and that record's seq


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """A stored attachment: its SHA-256 address, size, the attachment block to put in a
    record's content instead of the bytes, and whether the run already held it."""

    sha256: str
    size: int
    block: Block
    existed: bool
