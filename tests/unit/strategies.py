"""Hypothesis strategies for journald tests: content blocks, message lists and whole journals.

Reusable by every suite::

    from tests.unit.strategies import journals, message_lists, live_scenarios

* ``journals()`` draws a list of chained records (meta first) that the fold accepts: random
  interleavings of assistant turns with 0-4 tool calls, partial and out-of-order answers,
  duplicate and unknown-id results, follow-ups, rebases carrying arbitrary (even
  malformed-for-pairing) messages, and terminals followed by resumes; with ``state=True`` also
  framework state values (inline, attachment references, deletions of a key or a namespace)
  at any point, even while tool calls are open. Every record is in the normal form of
  ``journald.server.convert`` (so it survives a protobuf round trip) and valid against the
  published schema.
* ``message_lists()`` draws arbitrary provider-neutral message lists: consecutive same roles,
  orphan and duplicate tool_results, unanswered and repeated tool_use ids, empty messages,
  and now and then a block in the wrong role (a tool_result from the assistant, a tool_use
  from the user).
* ``live_scenarios()`` draws the steps of a live agent loop (model turns whose tools all
  complete, in any completion order, and typed follow-ups) for the live-vs-fold test.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from journald.core.fingerprint import Fingerprint
from journald.core.records import GENESIS, Record, make_record

Block = dict[str, Any]
Message = dict[str, Any]

# Text with unicode of every kind (no surrogates: records are valid UTF-8).
texts = st.text(max_size=12)
short_ids = st.sampled_from(["a", "b", "c", "d"])
hex64 = st.binary(min_size=32, max_size=32).map(bytes.hex)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def raw_json_text(draw: st.DrawFn) -> str:
    """Raw model JSON as text: odd spacing, escaped or literal unicode, float literals."""
    value = draw(json_values)
    indent = draw(st.sampled_from([None, 1, 3, "\t"]))
    seps = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,  ", " :\n ")]))
    body = json.dumps(value, indent=indent, separators=seps, ensure_ascii=draw(st.booleans()))
    pad = draw(st.sampled_from(["", " ", "\n", "\t \r\n"]))
    number = draw(st.sampled_from(["1.50e+3", "-0.0", "0.1", "12345678901234567890"]))
    return f'{pad}{{ "n" :{pad}{number} , "v"{seps[1]}{body}, "u": "\\u00e9é😀" }}{pad}'


def text_block(t: str) -> Block:
    return {"type": "text", "text": t}


text_blocks = texts.map(text_block)


@st.composite
def thinking_blocks(draw: st.DrawFn) -> Block:
    sig = base64.b64encode(draw(st.binary(max_size=48))).decode("ascii")
    return {"type": "thinking", "thinking": draw(texts), "signature": sig}


@st.composite
def provider_blocks(draw: st.DrawFn) -> Block:
    return {
        "type": "provider",
        "provider": draw(st.sampled_from(["x", "anthropic", "openai"])),
        "data": draw(raw_json_text()),
    }


redacted_blocks = st.binary(max_size=24).map(
    lambda b: {"type": "redacted_thinking", "data": base64.b64encode(b).decode("ascii")}
)


def tool_use_block(tid: str, name: str = "read", input_json: str = "{}") -> Block:
    return {"type": "tool_use", "id": tid, "name": name, "input": input_json}


def tool_result_block(tid: str, content: list[Block], is_error: bool = False) -> Block:
    return {"type": "tool_result", "tool_use_id": tid, "content": content, "is_error": is_error}


@st.composite
def tool_uses(draw: st.DrawFn, tid: str) -> Block:
    name = draw(st.sampled_from(["read", "write", "bash", "grep"]))
    return tool_use_block(tid, name, draw(raw_json_text()))


# Blocks an assistant writes besides tool_use, and blocks a person types.
assistant_blocks = st.one_of(text_blocks, thinking_blocks(), provider_blocks(), redacted_blocks)
typed_blocks = text_blocks
result_contents = st.lists(st.one_of(text_blocks, provider_blocks()), max_size=2)


# --- arbitrary message lists ------------------------------------------------------------


def _results(ids: st.SearchStrategy[str]) -> st.SearchStrategy[Block]:
    return st.builds(tool_result_block, ids, result_contents, st.booleans())


@st.composite
def assistant_messages(
    draw: st.DrawFn, ids: st.SearchStrategy[str] = short_ids, misplaced: bool = True
) -> Message:
    choices = [assistant_blocks, ids.flatmap(tool_uses)]
    if misplaced and draw(st.integers(0, 9)) == 0:  # now and then a result in the wrong role
        choices.append(_results(ids))
    blocks = draw(st.lists(st.one_of(*choices), max_size=4))
    return {"role": "assistant", "content": blocks}


@st.composite
def user_messages(
    draw: st.DrawFn, ids: st.SearchStrategy[str] = short_ids, misplaced: bool = True
) -> Message:
    choices = [text_blocks, _results(ids)]
    if misplaced and draw(st.integers(0, 9)) == 0:  # now and then a call in the wrong role
        choices.append(ids.flatmap(tool_uses))
    blocks = draw(st.lists(st.one_of(*choices), max_size=4))
    return {"role": "user", "content": blocks}


def message_lists(
    ids: st.SearchStrategy[str] = short_ids, max_size: int = 8
) -> st.SearchStrategy[list[Message]]:
    """Any sequence of user/assistant messages, however badly paired."""
    return st.lists(st.one_of(assistant_messages(ids), user_messages(ids)), max_size=max_size)


# --- whole journals ---------------------------------------------------------------------

STOP_REASONS_NO_TOOLS = ["end_turn", "pause_turn", "max_tokens", "stop_sequence"]
TERMINAL_REASONS = ["completed", "suspended", "error", "budget", "max_iterations"]
REBASE_REASONS = ["compaction", "restore", "fork", "import", "quarantine"]


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    d = draw(st.integers(1, 28))
    h, m, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    frac = draw(st.sampled_from(["", ".5", ".123456", ".123456789"]))
    return f"2026-11-{d:02d}T{h:02d}:{m:02d}:{s:02d}{frac}Z"


@st.composite
def traces(draw: st.DrawFn) -> dict[str, str] | None:
    if not draw(st.booleans()):
        return None
    tid = draw(st.binary(min_size=16, max_size=16)).hex()
    sid = draw(st.binary(min_size=8, max_size=8)).hex()
    return {"trace_id": tid, "span_id": sid}


@st.composite
def fingerprints(draw: st.DrawFn) -> Fingerprint:
    return Fingerprint(
        provider=draw(st.sampled_from(["anthropic", "openai", "x"])),
        model=draw(st.sampled_from(["m1", "m2", "claude-test"])),
        system_prompt_sha256=draw(hex64),
        tools_sha256=draw(hex64),
        thinking=draw(st.sampled_from(["off", "on", "adaptive"])),
        max_tokens=draw(st.integers(0, 2**53 - 1)),
        max_iterations=draw(st.integers(0, 1000)),
    )


@st.composite
def meta_payloads(draw: st.DrawFn, interactive: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "run_id": draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,20}\Z")),
        "created": draw(timestamps()),
        "fingerprint": draw(fingerprints()).as_json(),
        "prompt": draw(st.lists(typed_blocks, max_size=2)),
        "interactive": draw(st.booleans()) if interactive is None else interactive,
    }
    labels = draw(st.dictionaries(st.from_regex(r"\A[A-Za-z0-9_.:/-]{1,12}\Z"), texts, max_size=2))
    if labels:
        out["labels"] = labels
    if draw(st.booleans()):
        lineage: dict[str, Any] = {
            "forked_from_run_id": draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,10}\Z")),
            "forked_at_seq": draw(st.integers(0, 2**53 - 1)),
        }
        if draw(st.booleans()):
            lineage["forked_from_checkpoint_id"] = "01JCHECKPOINT" + draw(
                st.from_regex(r"\A[0-9A-Z]{1,8}\Z")
            )
        out["lineage"] = lineage
    return out


def _usage(draw: st.DrawFn) -> dict[str, int]:
    n = st.integers(0, 2**40)
    return {
        "input_tokens": draw(n),
        "output_tokens": draw(n),
        "cache_read_tokens": draw(n),
        "cache_creation_tokens": draw(n),
    }


@dataclass
class _Writer:
    """Chains records and remembers what the generated run has done so far."""

    ts: st.SearchStrategy[str]
    records: list[Record] = field(default_factory=list)
    next_id: int = 0
    iteration: int = 0
    open_ids: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)

    def add(self, draw: st.DrawFn, kind: str, payload: dict[str, Any]) -> None:
        prev = self.records[-1].hash if self.records else GENESIS
        seq = len(self.records) + 1
        self.records.append(make_record(seq, kind, payload, prev, draw(self.ts), draw(traces())))

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"toolu_{self.next_id:03d}"

    def result(self, draw: st.DrawFn, tid: str) -> None:
        self.add(
            draw,
            "tool_result",
            {
                "tool_use_id": tid,
                "content": draw(result_contents),
                "is_error": draw(st.booleans()),
                "remote": draw(st.booleans()),
            },
        )


ACTIONS = [
    "assistant",
    "assistant",
    "assistant",
    "late_result",
    "late_result",
    "duplicate_result",
    "unknown_result",
    "user",
    "rebase",
    "terminal",
]

state_namespaces = st.sampled_from(["langgraph.checkpoint", "agents.items", "é"])
state_keys = st.sampled_from(["k1", "k2", "ns|ch|00001", "😀"])


@st.composite
def state_payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A framework state record's payload, in the normal form of ``journald.server.convert``."""
    ns = draw(state_namespaces)
    form = draw(st.sampled_from(["inline", "inline", "attachment", "delete_key", "delete_ns"]))
    if form == "delete_ns":
        return {"namespace": ns, "deleted": True}
    key = draw(state_keys)
    if form == "delete_key":
        return {"namespace": ns, "key": key, "deleted": True}
    vtype = draw(st.sampled_from(["msgpack", "json", "null", "bytes"]))
    if form == "attachment":
        size = draw(st.integers(0, 2**53 - 1))
        return {"namespace": ns, "key": key, "type": vtype, "sha256": draw(hex64), "size": size}
    data = base64.b64encode(draw(st.binary(max_size=12))).decode("ascii")
    return {"namespace": ns, "key": key, "type": vtype, "data": data}


@st.composite
def journals(draw: st.DrawFn, max_steps: int = 12, state: bool = False) -> list[Record]:
    """A whole journal the fold accepts (see the module doc)."""
    w = _Writer(ts=timestamps())
    w.add(draw, "meta", draw(meta_payloads()))
    actions = [*ACTIONS, "state", "state"] if state else ACTIONS
    for _ in range(draw(st.integers(0, max_steps))):
        action = draw(st.sampled_from(actions))
        has_assistant = any(r.kind == "assistant" for r in w.records)
        if action == "assistant":
            ids = [w.fresh_id() for _ in range(draw(st.integers(0, 4)))]
            content = draw(st.lists(assistant_blocks, max_size=2))
            content += [draw(tool_uses(i)) for i in ids]
            content = draw(st.permutations(content))
            w.iteration += draw(st.integers(0, 2))
            stop = "tool_use" if ids else draw(st.sampled_from(STOP_REASONS_NO_TOOLS))
            w.add(
                draw,
                "assistant",
                {
                    "message": {"role": "assistant", "content": content},
                    "iteration": w.iteration,
                    "stop_reason": stop,
                    "usage": _usage(draw),
                },
            )
            # A new assistant turn abandons whatever the previous one left open.
            w.open_ids = list(ids)
            order = draw(st.permutations(ids))
            for tid in order[: draw(st.integers(0, len(ids)))]:
                w.result(draw, tid)
                w.open_ids.remove(tid)
                w.answered.append(tid)
        elif action == "late_result" and w.open_ids:
            tid = draw(st.sampled_from(w.open_ids))
            w.result(draw, tid)
            w.open_ids.remove(tid)
            w.answered.append(tid)
        elif action == "duplicate_result" and w.answered:
            w.result(draw, draw(st.sampled_from(w.answered)))
        elif action == "unknown_result" and has_assistant:
            w.result(draw, "unknown_" + draw(short_ids))
        elif action == "user":
            w.add(draw, "user", {"content": draw(st.lists(typed_blocks, min_size=1, max_size=2))})
            w.open_ids = []
        elif action == "rebase":
            payload: dict[str, Any] = {
                "reason": draw(st.sampled_from(REBASE_REASONS)),
                "messages": draw(message_lists(max_size=5)),
            }
            if draw(st.booleans()):
                payload["checkpoint_id"] = "01JCKPT" + draw(st.from_regex(r"\A[0-9A-Z]{1,6}\Z"))
                payload["checkpoint_hash"] = draw(hex64)
            if draw(st.booleans()):
                lo = draw(st.integers(1, len(w.records)))
                payload["covered"] = {"from_seq": lo, "to_seq": len(w.records)}
            w.add(draw, "rebase", payload)
            w.open_ids = []
        elif action == "state":
            w.add(draw, "state", draw(state_payloads()))
        elif action == "terminal":
            # A terminal may be followed by more records: a resume.
            w.add(
                draw,
                "terminal",
                {"reason": draw(st.sampled_from(TERMINAL_REASONS)), "message": draw(texts)},
            )
    return w.records


# --- live agent scenarios ---------------------------------------------------------------


@dataclass(frozen=True)
class ModelTurn:
    content: list[Block]  # the assistant message, tool_use blocks included
    stop_reason: str
    completion_order: list[int]  # indexes of the tool calls in the order they finish
    results: list[list[Block]]  # result content per tool call, in call order
    errors: list[bool]


@dataclass(frozen=True)
class FollowUp:
    content: list[Block]


@dataclass(frozen=True)
class LiveScenario:
    prompt: list[Block]
    steps: list[ModelTurn | FollowUp]


@st.composite
def live_scenarios(draw: st.DrawFn, max_steps: int = 10) -> LiveScenario:
    """Steps a live interactive agent can take: every model turn's tools all complete."""
    prompt = draw(st.lists(typed_blocks, max_size=2))
    steps: list[ModelTurn | FollowUp] = []
    next_id = 0
    # The model may be called when the history ends on a user message, or right after a
    # paused turn (the continuation of that turn).
    can_call = bool(prompt)
    for _ in range(draw(st.integers(0, max_steps))):
        if can_call and draw(st.booleans()):
            n = draw(st.integers(0, 4))
            ids = [f"toolu_{next_id + i}" for i in range(n)]
            next_id += n
            content = draw(st.lists(assistant_blocks, max_size=2))
            content = draw(st.permutations(content + [draw(tool_uses(i)) for i in ids]))
            stop = "tool_use" if n else draw(st.sampled_from(STOP_REASONS_NO_TOOLS))
            steps.append(
                ModelTurn(
                    content=list(content),
                    stop_reason=stop,
                    completion_order=list(draw(st.permutations(range(n)))),
                    results=[draw(result_contents) for _ in range(n)],
                    errors=[draw(st.booleans()) for _ in range(n)],
                )
            )
            can_call = n > 0 or stop == "pause_turn"
        else:
            steps.append(FollowUp(draw(st.lists(typed_blocks, min_size=1, max_size=2))))
            can_call = True
    return LiveScenario(prompt, steps)
