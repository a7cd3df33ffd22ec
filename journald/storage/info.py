"""Listing rows derived from a run's first and last records (shared by every backend)."""

from __future__ import annotations

from journald.core.errors import JournaldError
from journald.core.records import Record
from journald.storage.base import RunInfo

CORRUPTED = "corrupted"

PREVIEW_CHARS = 80


def prompt_preview(meta: Record) -> str:
    for block in meta.payload.get("prompt", []):
        if isinstance(block, dict) and block.get("type") == "text":
            text = " ".join(str(block.get("text", "")).split())
            return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return ""


def status_of(last: Record) -> str:
    if last.kind == "terminal":
        return str(last.payload.get("reason", "ended"))
    return "open"


def run_info_from(run_id: str, meta: Record, last: Record, count: int, size: int) -> RunInfo:
    fp = meta.payload.get("fingerprint") or {}
    return RunInfo(
        run_id=run_id,
        created=str(meta.payload.get("created", meta.ts)),
        updated=last.ts,
        model=str(fp.get("model", "")),
        prompt_preview=prompt_preview(meta),
        status=status_of(last),
        record_count=count,
        bytes=size,
        last_seq=last.seq,
        labels={str(k): str(v) for k, v in (meta.payload.get("labels") or {}).items()},
    )


def corrupted_info(run_id: str, err: JournaldError) -> RunInfo:
    """The listing row of a run whose stored bytes cannot be read (damaged, or of a newer
    journald's run format, which ``error`` says): listed, not fatal."""
    return RunInfo(run_id=run_id, status=CORRUPTED, error=err.message)
