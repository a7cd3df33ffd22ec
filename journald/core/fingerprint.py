"""The configuration fingerprint and the ordered resume gates (docs/protocol.md#fingerprint,
docs/protocol.md#resume-gates).

Hashing rules (pinned by ``tests/vectors/fingerprint.json``, which every client passes):

* ``system_prompt_sha256`` = SHA-256 hex of the canonical JSON array of the system prompt
  blocks, each a string: ``["You are ...", "Be brief."]``.
* ``tools_sha256`` = SHA-256 hex of the canonical JSON array of the tool definitions in
  declared order (each a JSON object, keys sorted; no floats).

The system prompt itself is never stored: only the hash enters the meta record.

Gates, in order, each its own error: completed → interactivity → provider → drift (waived
by ``force``). Provider is not part of ``equal``/``diff`` so those only govern forceable drift.

Pure core: no I/O imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from journald.core.errors import (
    Completed,
    FingerprintDrift,
    InteractivityMismatch,
    InvalidRecord,
    ProviderChanged,
)
from journald.core.records import canonical_json, sha256_hex

DRIFT_FIELDS = (
    "model",
    "system_prompt_sha256",
    "tools_sha256",
    "thinking",
    "max_tokens",
    "max_iterations",
)
_LABELS = {"system_prompt_sha256": "system prompt", "tools_sha256": "tools"}


@dataclass(frozen=True, slots=True)
class Fingerprint:
    provider: str
    model: str
    system_prompt_sha256: str
    tools_sha256: str
    thinking: str
    max_tokens: int
    max_iterations: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Fingerprint:
        try:
            return cls(
                provider=str(obj["provider"]),
                model=str(obj["model"]),
                system_prompt_sha256=str(obj["system_prompt_sha256"]),
                tools_sha256=str(obj["tools_sha256"]),
                thinking=str(obj["thinking"]),
                max_tokens=int(obj["max_tokens"]),
                max_iterations=int(obj["max_iterations"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRecord(f"field fingerprint: missing or malformed ({exc})") from exc


def hash_system_prompt(blocks: Sequence[str]) -> str:
    if isinstance(blocks, str):
        blocks = [blocks]
    return sha256_hex(canonical_json(list(blocks)))


def hash_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    return sha256_hex(canonical_json([dict(t) for t in tools]))


def compute(
    *,
    provider: str,
    model: str,
    system_prompt: Sequence[str],
    tools: Sequence[Mapping[str, Any]],
    thinking: str = "off",
    max_tokens: int = 0,
    max_iterations: int = 0,
) -> Fingerprint:
    """Compute a fingerprint locally from the raw configuration."""
    return Fingerprint(
        provider,
        model,
        hash_system_prompt(system_prompt),
        hash_tools(tools),
        thinking,
        max_tokens,
        max_iterations,
    )


def diff(stored: Fingerprint, current: Fingerprint) -> list[str]:
    """Per-field drift lines, provider excluded: ``model: a -> b``, ``system prompt: changed``."""
    lines: list[str] = []
    for name in DRIFT_FIELDS:
        a, b = getattr(stored, name), getattr(current, name)
        if a == b:
            continue
        label = _LABELS.get(name, name)
        lines.append(f"{label}: changed" if name in _LABELS else f"{label}: {a} -> {b}")
    return lines


def equal(stored: Fingerprint, current: Fingerprint) -> bool:
    return not diff(stored, current)


def check_gates(
    *,
    run_id: str,
    stored: Fingerprint,
    stored_interactive: bool,
    completed: bool,
    current: Fingerprint,
    current_interactive: bool,
    force: bool,
) -> None:
    """Run the resume gates in order; raise the first that refuses."""
    meta = {"run_id": run_id}
    if completed:
        raise Completed(
            f"run {run_id} already completed; start a new run or fork this one to continue",
            metadata=meta,
        )
    if stored_interactive != current_interactive:
        want = "interactive" if stored_interactive else "one-shot"
        have = "interactive" if current_interactive else "one-shot"
        raise InteractivityMismatch(
            f"run {run_id} is {want} but this writer is {have}; resume it in {want} mode",
            metadata={**meta, "stored": want, "current": have},
        )
    if stored.provider != current.provider:
        raise ProviderChanged(
            f"run {run_id} was written against provider {stored.provider!r}, not "
            f"{current.provider!r}; a history cannot move between providers (force does not "
            "apply): fork from a checkpoint with a new run instead",
            metadata={**meta, "stored": stored.provider, "current": current.provider},
        )
    lines = diff(stored, current)
    if lines and not force:
        raise FingerprintDrift(
            f"run {run_id} was written against another configuration ({'; '.join(lines)}); "
            "restore the configuration, or resume with force to accept the drift",
            metadata=meta,
            diff=lines,
        )
