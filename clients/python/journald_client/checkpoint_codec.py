"""Checkpoint operations' requests and answers: restore, compaction and fork requests
built, checkpoint metadata and the restore / compact results decoded
(docs/design.md#checkpoints); free of I/O, shared by ``Client``, ``AsyncClient`` and their
writers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from journald_proto import journal_pb2 as pb

from journald_client.content_blocks import blocks_json
from journald_client.response_decode import ack_from_pb
from journald_client.state import CheckpointMeta, CompactResult, LeaseWarning, RestoreResult

TRIGGERS = {
    pb.CHECKPOINT_TRIGGER_MANUAL: "manual",
    pb.CHECKPOINT_TRIGGER_PRE_COMPACTION: "pre_compaction",
    pb.CHECKPOINT_TRIGGER_PRE_RESTORE: "pre_restore",
    pb.CHECKPOINT_TRIGGER_PRE_PRUNE: "pre_prune",
    pb.CHECKPOINT_TRIGGER_IMPORT: "import",
}
COMPACT_STATUS = {
    pb.COMPACT_STATUS_COMPACTED: "compacted",
    pb.COMPACT_STATUS_REJECTED: "rejected",
    pb.COMPACT_STATUS_FAILED: "failed",
}

Summary = str | Sequence[Mapping[str, Any]]
"""A compaction summary: text (one user message) or a list of ``{role, content}`` dicts."""


def message_to_pb(m: Mapping[str, Any]) -> pb.Message:
    return pb.Message(role=str(m["role"]), content_json=blocks_json(m["content"]))


def summary_to_pb(summary: Summary) -> list[pb.Message]:
    if isinstance(summary, str):
        return [pb.Message(role="user", content_json=blocks_json(summary))]
    return [message_to_pb(m) for m in summary]


def restore_request(
    run_id: str, checkpoint_id: str, *, checkpoint: bool, lease_id: str = ""
) -> pb.RestoreRequest:
    return pb.RestoreRequest(
        run_id=run_id,
        checkpoint_id=checkpoint_id,
        skip_checkpoint=not checkpoint,
        lease_id=lease_id,
    )


def compact_request(
    run_id: str,
    summary: Summary,
    *,
    keep_last: int,
    checkpoint: bool,
    label: str,
    lease_id: str = "",
) -> pb.CompactRequest:
    return pb.CompactRequest(
        run_id=run_id,
        summary=summary_to_pb(summary),
        keep_last=max(0, keep_last),
        skip_checkpoint=not checkpoint,
        checkpoint_label=label,
        lease_id=lease_id,
    )


def fork_request(
    run_id: str,
    checkpoint_id: str,
    new_run_id: str,
    labels: Mapping[str, str] | None,
    message_window: int = 0,
) -> pb.ForkRequest:
    return pb.ForkRequest(
        run_id=run_id,
        checkpoint_id=checkpoint_id,
        new_run_id=new_run_id,
        labels=dict(labels or {}),
        message_window=max(0, message_window),
    )


def checkpoint_meta_from_pb(m: pb.CheckpointMeta) -> CheckpointMeta:
    return CheckpointMeta(
        checkpoint_id=m.checkpoint_id,
        run_id=m.run_id,
        trigger=TRIGGERS.get(m.trigger, "unspecified"),
        label=m.label,
        seq=m.seq,
        message_count=m.message_count,
        created=m.created,
        model=m.model,
        hash=m.hash,
        cwd=m.cwd,
    )


def restore_from_pb(r: pb.RestoreResponse) -> RestoreResult:
    return RestoreResult(
        from_messages=r.from_messages,
        to_messages=r.to_messages,
        pre_restore_checkpoint_id=r.pre_restore_checkpoint_id,
        ack=ack_from_pb(r.ack),
        warnings=[LeaseWarning(w.code, w.message) for w in r.warnings],
    )


def compact_from_pb(r: pb.CompactResponse) -> CompactResult:
    compacted = r.status == pb.COMPACT_STATUS_COMPACTED
    return CompactResult(
        status=COMPACT_STATUS.get(r.status, "unspecified"),
        reason=r.reason,
        checkpoint_id=r.checkpoint_id,
        removed_range=(
            (r.removed_range.from_seq, r.removed_range.to_seq)
            if compacted and r.HasField("removed_range")
            else None
        ),
        ack=ack_from_pb(r.ack) if compacted and r.HasField("ack") else None,
    )
