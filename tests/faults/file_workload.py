"""The deterministic record stream the crash-test writer appends (shared with the checks)."""

from __future__ import annotations

from typing import Any

from journald.core.records import GENESIS, Record, make_record
from tests.builders import TS, assistant_payload, meta_payload, text, user_payload

PAD = "x" * 40


def payload(run_id: str, seq: int) -> tuple[str, dict[str, Any]]:
    if seq == 1:
        return "meta", meta_payload(run_id, prompt="crash test")
    if seq % 10 == 0:
        return "rebase", {
            "reason": "compaction",
            "messages": [{"role": "user", "content": [text(f"summary up to {seq}")]}],
        }
    if seq % 2:
        return "assistant", assistant_payload([text(f"step {seq} {PAD}")], seq)
    return "user", user_payload(f"note {seq}")


def expected(run_id: str, count: int) -> list[Record]:
    """Records 1..count, chained (index i holds seq i+1)."""
    out: list[Record] = []
    prev = GENESIS
    for seq in range(1, count + 1):
        kind, body = payload(run_id, seq)
        rec = make_record(seq, kind, body, prev, TS)
        out.append(rec)
        prev = rec.hash
    return out
