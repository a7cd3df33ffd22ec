"""The configuration fingerprint, computed locally (docs/protocol.md#fingerprint).

The system prompt and the tool definitions never leave the process: only their SHA-256
hashes go to the daemon. The canonicalisation is pinned by ``tests/vectors/fingerprint.json``
and ``tests/vectors/canonical.json``, which every client language passes:

* canonical JSON = sorted keys, separators ``,``/``:``, UTF-8, non-ASCII written as itself;
* ``system_prompt_sha256`` = SHA-256 hex of the canonical JSON array of prompt strings;
* ``tools_sha256`` = SHA-256 hex of the canonical JSON array of tool objects, in declared
  order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from journald_proto import journal_pb2 as pb

# Built once: ``json.dumps`` with these options would build a new encoder on every call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: object) -> bytes:
    """The canonical bytes of a JSON value (no floats appear in journald records)."""
    return _CANONICAL.encode(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_system_prompt(blocks: str | Sequence[str]) -> str:
    """SHA-256 hex of the system prompt blocks (a bare string is one block)."""
    items = [blocks] if isinstance(blocks, str) else list(blocks)
    return sha256_hex(canonical_json(items))


def hash_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 hex of the tool definitions in declared order."""
    return sha256_hex(canonical_json([dict(t) for t in tools]))


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a run was written against; compared by the daemon's resume gates."""

    provider: str
    model: str
    system_prompt_sha256: str
    tools_sha256: str
    thinking: str = "off"
    max_tokens: int = 0
    max_iterations: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_pb(self) -> pb.Fingerprint:
        return pb.Fingerprint(**self.as_json())

    @classmethod
    def from_pb(cls, fp: pb.Fingerprint) -> Fingerprint:
        return cls(
            fp.provider,
            fp.model,
            fp.system_prompt_sha256,
            fp.tools_sha256,
            fp.thinking,
            fp.max_tokens,
            fp.max_iterations,
        )


def compute(
    *,
    provider: str,
    model: str,
    system_prompt: str | Sequence[str],
    tools: Sequence[Mapping[str, Any]] = (),
    thinking: str = "off",
    max_tokens: int = 0,
    max_iterations: int = 0,
) -> Fingerprint:
    """Compute a fingerprint from the raw configuration (nothing leaves the process)."""
    return Fingerprint(
        provider=provider,
        model=model,
        system_prompt_sha256=hash_system_prompt(system_prompt),
        tools_sha256=hash_tools(tools),
        thinking=thinking,
        max_tokens=max_tokens,
        max_iterations=max_iterations,
    )
