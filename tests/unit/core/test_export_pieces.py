"""The export written piece by piece (``journald.core.export_pieces``) is byte for byte the
export written at once (``export_bytes``), and it verifies; whatever the chunk size, the
chunks join back to it."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.checkpoints import (
    Checkpoint,
    CheckpointMeta,
    attachment_block,
    content_hash,
    export_bytes,
    verify_export,
)
from journald.core.export_pieces import Chunks, ExportPieces
from journald.core.schema import validate_payload

CID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def checkpoint(messages: list[dict[str, Any]]) -> Checkpoint:
    meta = CheckpointMeta(
        checkpoint_id=CID,
        run_id="r1",
        trigger="manual",
        label="lé label ✓",
        seq=7,
        message_count=len(messages),
        created="2026-11-30T12:00:00.000000Z",
        model="m",
        hash=content_hash(messages),
        cwd="/work",
    )
    return Checkpoint(meta, messages)


def pieced(cp: Checkpoint, blobs: dict[str, bytes]) -> bytes:
    p = ExportPieces(cp)
    out = [p.start()]
    out += [p.attachment(d, blobs[d]) for d in sorted(blobs)]
    out += list(p.messages())
    out.append(p.end())
    return b"".join(out)


def text_turns(texts: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, t in enumerate(texts):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": [{"type": "text", "text": t}]})
    return out


def test_an_empty_checkpoint_is_the_same_bytes_both_ways() -> None:
    cp = checkpoint([])
    assert pieced(cp, {}) == export_bytes(cp, {})


def test_a_conversation_with_attachments_is_the_same_bytes_both_ways_and_verifies() -> None:
    blobs = {hashlib.sha256(b).hexdigest(): b for b in (b"\x00\x01png", bytes(range(256)) * 9)}
    refs = [attachment_block(d, len(b), "image/png", "a.png") for d, b in blobs.items()]
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": 'héllo 世界 "q" \\ \x01 \u2028'}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "shot", "input": '{"a" : 1.5}'},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": refs, "is_error": False}
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "🤔 done", "n": 2**53 - 1}]},
    ]
    cp = checkpoint(msgs)
    data = pieced(cp, blobs)
    assert data == export_bytes(cp, blobs)
    assert verify_export(data, validate_payload).attachments == blobs


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(max_size=40), max_size=6),
    size=st.integers(min_value=1, max_value=300),
)
def test_any_conversation_and_any_chunk_size_join_back_to_the_export(
    texts: list[str], size: int
) -> None:
    cp = checkpoint(text_turns(texts))
    want = export_bytes(cp, {})
    chunks, p = Chunks(size), ExportPieces(cp)
    got = list(chunks.add(p.start()))
    for piece in p.messages():
        got += chunks.add(piece)
    got += chunks.add(p.end())
    got += chunks.rest()
    assert b"".join(got) == want
    assert all(len(c) == size for c in got[:-1])
    assert all(0 < len(c) <= size for c in got)


def test_pieces_out_of_order_are_refused_rather_than_written() -> None:
    p = ExportPieces(checkpoint([]))
    with pytest.raises(RuntimeError, match="out of order"):
        p.end()
    p.start()
    p.attachment("b" * 64, b"x")
    with pytest.raises(RuntimeError, match="not after"):
        p.attachment("a" * 64, b"y")
