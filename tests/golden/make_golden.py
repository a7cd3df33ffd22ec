"""Generate the golden journals ONCE: ``python -m tests.golden.make_golden [--force]``.

Each case is ``<name>.jsonl`` (canonical record lines, built with ``tests/builders.py``) and
``<name>.expected.json`` (the folded state, the governed view and the resume notices, or the
typed error the journal must raise). The expectations are written from the fold of the day
and then reviewed by hand; ``tests/unit/core/test_golden.py`` re-folds every journal on every run
and compares, and never rewrites anything. This script refuses to overwrite an existing file
unless given ``--force`` (use it only when a change of behaviour is intended and reviewed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a plain script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from journald.core import governance
from journald.core.fold import RunState, fold, resume_warnings
from journald.core.records import Record, canonical_json
from tests.builders import (
    JournalBuilder,
    assistant_payload,
    result_payload,
    terminal_payload,
    text,
    tool_use,
    user_payload,
)

HERE = Path(__file__).resolve().parent


def state_json(st: RunState) -> dict[str, Any]:
    """The folded state as plain JSON (what the expected files hold)."""
    pending = None
    if st.pending is not None:
        p = st.pending
        pending = {
            "message": p.message,
            "iteration": p.iteration,
            "stop_reason": p.stop_reason,
            "seq": p.seq,
            "results": [
                {
                    "tool_use_id": r.tool_use_id,
                    "content": r.content,
                    "is_error": r.is_error,
                    "seq": r.seq,
                }
                for r in p.results
            ],
            "answered_ids": p.answered_ids,
            "unanswered_ids": [c.id for c in p.unanswered],
        }
    c = st.counters
    governed, report = governance.governed_messages(st)
    out: dict[str, Any] = {
        "run_id": st.run_id,
        "interactive": st.interactive,
        "messages": list(st.messages),
        "pending": pending,
        "counters": {
            "llm_calls": c.llm_calls,
            "tool_calls": c.tool_calls,
            "remote_tool_calls": c.remote_tool_calls,
            "input_tokens": c.input_tokens,
            "output_tokens": c.output_tokens,
            "cache_read_tokens": c.cache_read_tokens,
            "cache_creation_tokens": c.cache_creation_tokens,
        },
        "next_iteration": st.next_iteration,
        "last_stop_reason": st.last_stop_reason,
        "terminal": st.terminal,
        "terminal_is_last": st.terminal_is_last,
        "completed": st.completed,
        "last_seq": st.last_seq,
        "last_hash": st.last_hash,
        "resume_at_input_boundary": st.resume_at_input_boundary,
        "anomalies": [{"seq": a.seq, "kind": a.kind} for a in st.anomalies],
        "resume_warnings": [code for code, _ in resume_warnings(st)],
        "governed": {
            "messages": governed,
            "report": {
                "synthesized_results": report.synthesized_results,
                "dropped_messages": report.dropped_messages,
                "dropped_blocks": report.dropped_blocks,
            },
        },
    }
    if st.state:  # only journals with framework state carry the key (older goldens lack it)
        out["state"] = [
            {"namespace": ns, "key": key, "type": v.type, "data": v.data, "sha256": v.sha256}
            | {"size": v.size, "seq": v.seq}
            for ns, key, v in st.state_entries()
        ]
    return out


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- the cases ------------------------------------------------------------------------------


def completed_run() -> list[Record]:
    b = JournalBuilder("golden-completed", prompt="Summarise a.txt and b.txt")
    b.turn(["t1", "t2"])
    b.add("assistant", assistant_payload([text("Both files are short.")], 2))
    b.add("terminal", terminal_payload("completed"))
    return b.records


def pending_tool_batch() -> list[Record]:
    b = JournalBuilder("golden-pending", prompt="Read three files")
    b.turn(["t1", "t2", "t3"], answered=["t3", "t1"])  # out of order, t2 never answered
    return b.records


def paused_turn() -> list[Record]:
    b = JournalBuilder("golden-paused", prompt="Search the web", interactive=True)
    b.add("assistant", assistant_payload([text("Searching...")], 1, "pause_turn"))
    return b.records


def follow_up_merge() -> list[Record]:
    b = JournalBuilder("golden-followup", prompt="Look at a.txt", interactive=True)
    b.turn(["t1"])
    b.add("user", user_payload("and also b.txt"))  # typed after the results: merges
    b.add("assistant", assistant_payload([text("Done with both.")], 2))
    b.add("user", user_payload("one more thing:"))  # two follow-ups in a row: one message
    b.add("user", user_payload("check c.txt too"))
    b.add("assistant", assistant_payload([text("c.txt is empty.")], 3))
    return b.records


def rebase_compaction() -> list[Record]:
    b = JournalBuilder("golden-rebase", prompt="Refactor the module")
    b.turn(["t1"])
    b.turn(["t2"])
    b.add("assistant", assistant_payload([text("Refactor planned.")], 3))
    b.add("user", user_payload("go on"))
    kept_tail = [
        {"role": "user", "content": [text("Summary: read t1 and t2, planned the refactor.")]},
        {"role": "assistant", "content": [text("Refactor planned.")]},
        {"role": "user", "content": [text("go on")]},
    ]
    b.add(
        "rebase",
        {
            "reason": "compaction",
            "messages": kept_tail,
            "checkpoint_id": "01JDGOLDENCHECKPOINT00000",
            "checkpoint_hash": "ab" * 32,
            "covered": {"from_seq": 1, "to_seq": 7},
        },
    )
    b.turn(["t3"], iteration=4)
    b.add("assistant", assistant_payload([text("Refactored.")], 5))
    b.add("terminal", terminal_payload("completed"))
    return b.records


def error_tool_result() -> list[Record]:
    b = JournalBuilder("golden-error-result", prompt="Delete tmp/")
    b.add(
        "assistant",
        assistant_payload([text("Deleting."), tool_use("t1", "bash", '{"cmd":"rm -r tmp"}')], 1),
    )
    b.add("tool_result", result_payload("t1", "rm: tmp: Permission denied", is_error=True))
    b.add("assistant", assistant_payload([text("I lack permission.")], 2))
    b.add("terminal", terminal_payload("error", "tool failed"))
    return b.records


def framework_state() -> list[Record]:
    """A LangGraph-style thread: checkpoints and channel values as state records (one in an
    attachment), pending writes saved while a tool call is open, a deleted write and a
    deleted namespace; the conversation beside it is untouched by all of it."""
    b = JournalBuilder("golden-state", prompt="What is 6 x 7?")

    def put(ns: str, key: str, vtype: str, data: str) -> None:
        b.add("state", {"namespace": ns, "key": key, "type": vtype, "data": data})

    put("langgraph.blob", "|messages|1", "msgpack", "kZGkaGVsbG8=")
    b.add(
        "state",
        {
            "namespace": "langgraph.blob",
            "key": "|context|1",
            "type": "msgpack",
            "sha256": "5d" * 32,
            "size": 70000,
        },
    )
    put("langgraph.checkpoint", "|1efa0001", "json", "eyJpZCI6IjFlZmEwMDAxIn0=")
    b.add("assistant", assistant_payload([tool_use("t1", "multiply", '{"a":6,"b":7}')], 1))
    put("langgraph.writes", "|1efa0001|task-1|0", "msgpack", "Kg==")
    put("langgraph.writes", "|1efa0001|task-1|-1", "json", "ImJvb20i")
    b.add("state", {"namespace": "langgraph.writes", "key": "|1efa0001|task-1|-1", "deleted": True})
    b.add("tool_result", result_payload("t1", "42"))
    put("langgraph.checkpoint", "|1efa0002", "json", "eyJpZCI6IjFlZmEwMDAyIn0=")
    put("scratch", "tmp", "bytes", "")
    b.add("state", {"namespace": "scratch", "deleted": True})
    b.add("assistant", assistant_payload([text("6 x 7 = 42")], 2))
    return b.records


def future_version() -> list[bytes]:
    b = JournalBuilder("golden-future", prompt="hi")
    b.add("assistant", assistant_payload([text("hello")], 1))
    obj = b.records[1].as_json()
    obj["v"] = 2
    return [b.records[0].raw, canonical_json(obj)]


CASES: dict[str, Callable[[], list[Record]]] = {
    "completed_run": completed_run,
    "pending_tool_batch": pending_tool_batch,
    "paused_turn": paused_turn,
    "follow_up_merge": follow_up_merge,
    "rebase_compaction": rebase_compaction,
    "error_tool_result": error_tool_result,
    "framework_state": framework_state,
}
ERROR_CASES: dict[str, tuple[Callable[[], list[bytes]], dict[str, Any]]] = {
    "future_version": (
        future_version,
        {"error": {"code": "version_unsupported", "class": "VersionUnsupported", "line": 2}},
    ),
}


def build() -> dict[str, tuple[bytes, str]]:
    out: dict[str, tuple[bytes, str]] = {}
    for name, make in CASES.items():
        recs = make()
        out[name] = (b"".join(r.raw + b"\n" for r in recs), dumps(state_json(fold(recs))))
    for name, (make_lines, expected) in ERROR_CASES.items():
        out[name] = (b"".join(line + b"\n" for line in make_lines()), dumps(expected))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--force", action="store_true", help="overwrite existing golden files")
    args = ap.parse_args(argv)
    files = {}
    for name, (lines, expected) in build().items():
        files[args.out / f"{name}.jsonl"] = lines
        files[args.out / f"{name}.expected.json"] = expected.encode("utf-8")
    existing = [p for p in files if p.exists()]
    if existing and not args.force:
        print(
            "refusing to overwrite existing golden files (review the change, then pass "
            "--force): " + ", ".join(p.name for p in existing),
            file=sys.stderr,
        )
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        path.write_bytes(data)
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
