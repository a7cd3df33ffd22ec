"""Generate the cross-language vectors ONCE: ``python -m tests.vectors.make_vectors [--force]``.

The files (``canonical.json``, ``fingerprint.json``, ``records.json``) are the contract every
client language passes (Python, Go, TypeScript); they are checked in and never rewritten by
a test. The canonical texts below are written out by hand and cross-checked against
journald's encoder before anything is written, so a disagreement stops the generator.
Files are pure ASCII JSON (non-ASCII characters appear as \\u escapes in the *file*; the
canonical texts they decode to hold those characters literally).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a plain script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from journald.core import fingerprint
from journald.core.records import GENESIS, Record, canonical_json, make_record

HERE = Path(__file__).resolve().parent

# (name, value, canonical text written by hand)
CANONICAL: list[tuple[str, Any, str]] = [
    ("sorts_keys", {"b": 1, "a": 2, "c": 3}, '{"a":2,"b":1,"c":3}'),
    (
        "keys_differing_only_in_case",
        {"a": 1, "B": 2, "b": 3, "A": 4},
        '{"A":4,"B":2,"a":1,"b":3}',
    ),
    (
        "digits_punctuation_and_letters_sort_by_code_point",
        {"a": 1, "1": 2, "_": 3, "Z": 4, "10": 5, "9": 6, " ": 7, "-": 8},
        '{" ":7,"-":8,"1":2,"10":5,"9":6,"Z":4,"_":3,"a":1}',
    ),
    (
        "key_prefixes_sort_first",
        {"ab": 1, "a": 2, "abc": 3, "b": 4},
        '{"a":2,"ab":1,"abc":3,"b":4}',
    ),
    (
        # Code point order, NOT UTF-16 code unit order: U+FB01 sorts before U+1F600 here,
        # while a UTF-16 comparison (JavaScript's default sort) puts the emoji first.
        "non_ascii_keys_sort_by_code_point_not_utf16",
        {"é": 1, "z": 2, "ü": 3, "中": 4, "😀": 5, "\ufb01": 6},
        '{"z":2,"é":1,"ü":3,"中":4,"\ufb01":6,"😀":5}',
    ),
    (
        "nested_objects_sorted_at_every_level_arrays_keep_order",
        {"outer": {"inner": {"deep": [{"b": 1, "a": 2}]}}, "list": [3, 1, 2]},
        '{"list":[3,1,2],"outer":{"inner":{"deep":[{"a":2,"b":1}]}}}',
    ),
    ("empty_object", {}, "{}"),
    ("empty_array", [], "[]"),
    ("empty_containers_and_string", {"o": {}, "a": [], "s": ""}, '{"a":[],"o":{},"s":""}'),
    ("cjk_literal", "日本語のテキスト, 中文, 한국어", '"日本語のテキスト, 中文, 한국어"'),
    ("emoji_and_astral_literal", "😀👍🏽𝄞 family: 👨‍👩‍👧", '"😀👍🏽𝄞 family: 👨‍👩‍👧"'),
    (
        "combining_marks_not_normalized",
        "e\u0301 and \u00e9 and a\u0308\u0323",
        '"e\u0301 and \u00e9 and a\u0308\u0323"',
    ),
    (
        "control_characters_escaped",
        "line\nbreak\ttab\rcr\u0000nul\u001fus\u0008bs\u000cff\u0001soh",
        '"line\\nbreak\\ttab\\rcr\\u0000nul\\u001fus\\bbs\\fff\\u0001soh"',
    ),
    ("delete_character_literal", "del\u007fend", '"del\u007fend"'),
    ("quote_and_backslash_escaped", 'say "hi" \\ C:\\path', '"say \\"hi\\" \\\\ C:\\\\path"'),
    (
        "html_characters_and_slash_unescaped",
        "</script><b>&amp;</b> a/b <!-- -->",
        '"</script><b>&amp;</b> a/b <!-- -->"',
    ),
    ("line_and_paragraph_separators_unescaped", "a\u2028b\u2029c", '"a\u2028b\u2029c"'),
    (
        "integers_up_to_2_pow_53_minus_1",
        [0, 1, -1, 9007199254740991, -9007199254740991, 1234567890123, 4294967296],
        "[0,1,-1,9007199254740991,-9007199254740991,1234567890123,4294967296]",
    ),
    ("booleans_and_null", {"t": True, "f": False, "n": None}, '{"f":false,"n":null,"t":true}'),
    ("top_level_scalars_true", True, "true"),
    ("top_level_null", None, "null"),
    ("top_level_negative_integer", -42, "-42"),
    (
        "mixed_array_keeps_order",
        [{"b": None, "a": [True]}, "x", [], {}, 0],
        '[{"a":[true],"b":null},"x",[],{},0]',
    ),
    (
        "raw_model_json_is_text_with_its_spacing_kept",
        {"input": '{ "a" : 1.50e3,\n "b":[ ] }', "type": "tool_use"},
        '{"input":"{ \\"a\\" : 1.50e3,\\n \\"b\\":[ ] }","type":"tool_use"}',
    ),
    (
        "unicode_key_and_value_with_escapes_in_keys",
        {"ключ\n": "значение", "k\u0000": "v"},
        '{"k\\u0000":"v","ключ\\n":"значение"}',
    ),
]

FINGERPRINT_CASES: list[tuple[str, list[str], list[dict[str, Any]]]] = [
    ("one_block_no_tools", ["You are a careful agent."], []),
    ("no_system_prompt_no_tools", [], []),
    (
        "several_blocks_with_unicode_and_control_characters",
        ["You are Ω-bot 🤖.", 'Rules:\n\t1. be brief\n\t2. quote "exactly"', "</script>\u2028"],
        [],
    ),
    (
        "one_tool_nested_schema_keys_sorted",
        ["sys"],
        [
            {
                "name": "read",
                "description": "Read a file",
                "input_schema": {
                    "type": "object",
                    "required": ["path"],
                    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                },
            }
        ],
    ),
    (
        "two_tools_in_declared_order",
        ["sys"],
        [
            {"name": "read", "description": "Read", "input_schema": {"type": "object"}},
            {"name": "write", "description": "Write", "input_schema": {"type": "object"}},
        ],
    ),
    (
        "two_tools_other_order_hashes_differently",
        ["sys"],
        [
            {"name": "write", "description": "Write", "input_schema": {"type": "object"}},
            {"name": "read", "description": "Read", "input_schema": {"type": "object"}},
        ],
    ),
    (
        "tool_with_integers_booleans_and_unicode",
        ["日本語のシステム"],
        [
            {
                "name": "fetch",
                "description": "Fetch a URL ✓ & <render>",
                "input_schema": {
                    "type": "object",
                    "properties": {"retries": {"type": "integer", "maximum": 9007199254740991}},
                    "additionalProperties": False,
                },
                "cache_control": None,
            }
        ],
    ),
]

TS = "2026-11-30T12:00:00Z"
FP = fingerprint.compute(
    provider="anthropic",
    model="claude-test",
    system_prompt=["You are a careful agent."],
    tools=[],
    thinking="on",
    max_tokens=4096,
    max_iterations=50,
)
SIG = base64.b64encode(bytes(range(256))[::7]).decode("ascii")


def record_cases() -> list[tuple[str, Record]]:
    meta_min = {
        "run_id": "run-min",
        "created": TS,
        "fingerprint": FP.as_json(),
        "prompt": [],
        "interactive": False,
    }
    meta_full = {
        "run_id": "run_Full-1",
        "created": "2026-11-30T12:00:00.123456789Z",
        "fingerprint": FP.as_json(),
        "prompt": [{"type": "text", "text": "Fix the bug in main.go ✓"}],
        "interactive": True,
        "labels": {"team": "core", "ticket": "JD-1"},
        "lineage": {
            "forked_from_run_id": "run-src",
            "forked_from_checkpoint_id": "01JDCHECKPOINT0000000000AB",
            "forked_at_seq": 42,
        },
    }
    assistant = {
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me look.", "signature": SIG},
                {"type": "redacted_thinking", "data": "c2VjcmV0"},
                {"type": "text", "text": "Reading the file. 日本"},
                {"type": "tool_use", "id": "toolu_01", "name": "read", "input": '{"path": "a"}'},
                {"type": "provider", "provider": "x", "data": ' {"k" : [1.5, "\\u00e9"]}\n'},
            ],
        },
        "iteration": 1,
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 1200,
            "output_tokens": 85,
            "cache_read_tokens": 1000,
            "cache_creation_tokens": 9007199254740991,
        },
    }
    result_ok = {
        "tool_use_id": "toolu_01",
        "content": [{"type": "text", "text": "package main\n"}],
        "is_error": False,
        "remote": True,
    }
    result_err = {
        "tool_use_id": "toolu_02",
        "content": [{"type": "text", "text": "permission denied"}],
        "is_error": True,
        "remote": False,
    }
    user = {"content": [{"type": "text", "text": "also check </script> & \u2028"}]}
    rebase = {
        "reason": "compaction",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Summary so far."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Understood."}]},
        ],
        "checkpoint_id": "01JDCHECKPOINT0000000000AB",
        "checkpoint_hash": "cd" * 32,
        "covered": {"from_seq": 1, "to_seq": 9},
    }
    rebase_min = {"reason": "restore", "messages": []}
    terminal = {"reason": "completed", "message": ""}
    terminal_err = {"reason": "error", "message": 'model returned 529 "overloaded"'}
    trace = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
    prev = "ef" * 32
    # Framework state: the bytes travel as standard base64 with padding. These bytes cover
    # every base64 tail (no padding, "=", "==") and the two characters beyond [A-Za-z0-9].
    state_inline = {
        "namespace": "langgraph.checkpoint",
        "key": "|01JD\u00e9|\u65e5",
        "type": "msgpack",
        "data": base64.b64encode(bytes([0x00, 0xFB, 0xFF, 0x3E, 0x3F])).decode("ascii"),
    }
    state_empty = {"namespace": "agents.items", "key": "000001", "type": "null", "data": ""}
    state_attachment = {
        "namespace": "langgraph.blob",
        "key": "|messages|2",
        "type": "msgpack",
        "sha256": "9f" * 32,
        "size": 9007199254740991,
    }
    state_delete_key = {"namespace": "langgraph.writes", "key": "cp1|task|0", "deleted": True}
    state_delete_ns = {"namespace": "agents.items", "deleted": True}
    return [
        ("meta_minimal", make_record(1, "meta", meta_min, GENESIS, TS)),
        (
            "meta_with_labels_lineage_and_trace",
            make_record(1, "meta", meta_full, GENESIS, TS, trace),
        ),
        ("assistant_with_every_block_kind", make_record(2, "assistant", assistant, prev, TS)),
        ("tool_result_remote", make_record(3, "tool_result", result_ok, prev, TS)),
        ("tool_result_error", make_record(4, "tool_result", result_err, prev, TS)),
        ("user_follow_up", make_record(5, "user", user, prev, TS)),
        ("rebase_compaction", make_record(6, "rebase", rebase, prev, TS)),
        ("rebase_minimal", make_record(7, "rebase", rebase_min, prev, TS)),
        ("terminal_completed", make_record(8, "terminal", terminal, prev, TS)),
        ("terminal_error_with_trace", make_record(9, "terminal", terminal_err, prev, TS, trace)),
        ("large_seq", make_record(9007199254740991, "terminal", terminal, prev, TS)),
        ("state_inline_bytes", make_record(10, "state", state_inline, prev, TS)),
        ("state_empty_value", make_record(11, "state", state_empty, prev, TS)),
        ("state_in_attachment", make_record(12, "state", state_attachment, prev, TS, trace)),
        ("state_delete_key", make_record(13, "state", state_delete_key, prev, TS)),
        ("state_delete_namespace", make_record(14, "state", state_delete_ns, prev, TS)),
    ]


def chain_records() -> list[Record]:
    payloads: list[tuple[str, dict[str, Any]]] = [
        (
            "meta",
            {
                "run_id": "chain-1",
                "created": TS,
                "fingerprint": FP.as_json(),
                "prompt": [{"type": "text", "text": "hello"}],
                "interactive": True,
            },
        ),
        (
            "assistant",
            {
                "message": {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": "{}"}],
                },
                "iteration": 1,
                "stop_reason": "tool_use",
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "cache_read_tokens": 0,
                    "cache_creation_tokens": 0,
                },
            },
        ),
        (
            "tool_result",
            {
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "ok"}],
                "is_error": False,
                "remote": False,
            },
        ),
        ("user", {"content": [{"type": "text", "text": "thanks"}]}),
        (
            "rebase",
            {
                "reason": "compaction",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "summary"}]}],
                "covered": {"from_seq": 1, "to_seq": 4},
            },
        ),
        (
            "assistant",
            {
                "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
                "iteration": 2,
                "stop_reason": "end_turn",
                "usage": {
                    "input_tokens": 3,
                    "output_tokens": 1,
                    "cache_read_tokens": 0,
                    "cache_creation_tokens": 0,
                },
            },
        ),
        ("terminal", {"reason": "completed", "message": ""}),
        ("state", {"namespace": "ns", "key": "k", "type": "json", "data": "eyJhIjoxfQ=="}),
        ("state", {"namespace": "ns", "key": "k", "deleted": True}),
        ("terminal", {"reason": "completed", "message": ""}),
    ]
    out: list[Record] = []
    for seq, (kind, payload) in enumerate(payloads, 1):
        out.append(make_record(seq, kind, payload, out[-1].hash if out else GENESIS, TS))
    return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build() -> dict[str, Any]:
    canonical_cases = []
    for name, value, text in CANONICAL:
        got = canonical_json(value).decode("utf-8")
        if got != text:
            raise SystemExit(f"{name}: hand-written canonical {text!r} != encoder {got!r}")
        canonical_cases.append(
            {"name": name, "value": value, "canonical": text, "sha256": _sha(text)}
        )
    fp_cases = [
        {
            "name": name,
            "system_prompt": prompt,
            "tools": tools,
            "system_prompt_sha256": fingerprint.hash_system_prompt(prompt),
            "tools_sha256": fingerprint.hash_tools(tools),
        }
        for name, prompt, tools in FINGERPRINT_CASES
    ]
    rec_cases = [
        {
            "name": name,
            "record": rec.as_json(),
            "canonical": rec.raw.decode("utf-8"),
            "sha256": rec.hash,
        }
        for name, rec in record_cases()
    ]
    return {
        "canonical.json": {"cases": canonical_cases},
        "fingerprint.json": {"cases": fp_cases},
        "records.json": {"cases": rec_cases, "chain": [r.as_json() for r in chain_records()]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="generate the cross-language vectors once")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--force", action="store_true", help="overwrite existing vector files")
    args = ap.parse_args(argv)
    files = {
        args.out / n: json.dumps(v, indent=1, ensure_ascii=True) + "\n" for n, v in build().items()
    }
    existing = [p.name for p in files if p.exists()]
    if existing and not args.force:
        print(f"refusing to overwrite {', '.join(existing)} (pass --force)", file=sys.stderr)
        return 1
    for path, text in files.items():
        path.write_text(text, encoding="ascii")
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
