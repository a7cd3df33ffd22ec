"""Content blocks as the client sends them: a string or block list to the wire form.

``tool_use`` input and ``provider`` data travel as raw JSON *text* (records hold no floats,
docs/protocol.md#canonical-json), so a dict given for them is serialised here, once; shared by
the record builders (``codec.Entry``), the request builders and the response decoders.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from journald_client.fingerprint import canonical_json
from journald_client.state import Block


def _block(b: Mapping[str, Any]) -> Block:
    out = dict(b)
    # tool_use input and provider data are raw JSON *text* on the wire (no floats in records)
    if out.get("type") == "tool_use" and "input" in out and not isinstance(out["input"], str):
        out["input"] = canonical_json(out["input"]).decode()
    if out.get("type") == "provider" and "data" in out and not isinstance(out["data"], str):
        out["data"] = canonical_json(out["data"]).decode()
    if out.get("type") == "tool_result" and "content" in out:
        out["content"] = blocks(out["content"])
    return out


def blocks(content: str | Sequence[Mapping[str, Any]]) -> list[Block]:
    """Content blocks from a string (one text block) or a list of blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_block(b) for b in content]


def blocks_json(content: str | Sequence[Mapping[str, Any]]) -> bytes:
    return canonical_json(blocks(content))


RESULT_TEXT_TYPE = "text/plain; charset=utf-8"
RESULT_BLOCKS_TYPE = "application/json"


def result_attachment(content: str | Sequence[Mapping[str, Any]]) -> tuple[bytes, str]:
    """A tool result's content as attachment bytes (``tool_result(..., as_attachment=True)``,
    docs/protocol.md#large-tool-results): text (a string, or one text block) as UTF-8, any
    other content as the canonical JSON of its blocks."""
    items = blocks(content)
    if len(items) == 1 and set(items[0]) == {"type", "text"} and items[0]["type"] == "text":
        return str(items[0]["text"]).encode("utf-8"), RESULT_TEXT_TYPE
    return canonical_json(items), RESULT_BLOCKS_TYPE


def _json_list(data: bytes) -> list[Any]:
    if not data:
        return []
    value = json.loads(data)
    return value if isinstance(value, list) else []
