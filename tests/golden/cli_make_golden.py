"""Generate the CLI golden journal ONCE: ``python -m tests.golden.cli_make_golden [--force]``.

``cli_replay.jsonl`` is one run that exercises every replay rule at once: results answered
out of order, a follow-up typed after tool results (merged into their user message), two
follow-ups in a row (one message), an error result, tool output full of terminal escape
sequences, a tool argument far wider than any terminal, a thinking block, and a pending turn
with one of its two calls still unanswered. ``cli_replay.expected.json`` is its fold (the
same shape as every golden, checked by ``tests/unit/core/test_golden.py``); the CLI's renderings of
it are checked against ``tests/integration/expected/cli_*.txt`` by
``tests/integration/cli/test_cli.py``. Like ``make_golden``, this refuses to overwrite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a plain script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from journald.core.fold import fold
from journald.core.records import Record
from tests.builders import (
    JournalBuilder,
    assistant_payload,
    result_payload,
    text,
    tool_use,
    user_payload,
)
from tests.golden.make_golden import dumps, state_json

HERE = Path(__file__).resolve().parent
RUN_ID = "cli-replay"
LONG_PATH = "src/" + "/".join(f"module_{i:02d}" for i in range(30)) + "/settings.toml"
ESCAPED_LS = (
    "\x1b]0;pwned title\x07\x1b[1;34mobj\x1b[0m  \x1b[31mtmp\x1b[0m  cache\r\n"
    "total 3\x1b[2K\x1b[1G\n"
    "progress 10%\rprogress 100%"
)


def cli_replay() -> list[Record]:
    b = JournalBuilder(RUN_ID, prompt="Tidy the build directory", interactive=True)
    b.add(
        "assistant",
        assistant_payload(
            [
                text("I'll look first."),
                tool_use("t1", "bash", '{"cmd":"ls build"}'),
                tool_use("t2", "read", '{"path":"' + LONG_PATH + '"}'),
            ],
            1,
        ),
    )
    b.add("tool_result", result_payload("t2", "[build]\nout = 'build'"))
    b.add("tool_result", result_payload("t1", ESCAPED_LS))
    b.add("user", user_payload("also clear the cache"))
    b.add(
        "assistant",
        assistant_payload(
            [text("Clearing it."), tool_use("t3", "bash", '{"cmd":"rm -rf build/cache"}')], 2
        ),
    )
    b.add(
        "tool_result",
        result_payload("t3", "rm: build/cache: Permission denied", is_error=True),
    )
    b.add(
        "assistant",
        assistant_payload([text("I can't remove the cache.\nShould I use sudo?")], 3),
    )
    b.add("user", user_payload("yes, go ahead"))
    b.add("user", user_payload("but keep build/keep"))
    b.add(
        "assistant",
        assistant_payload(
            [
                {"type": "thinking", "thinking": "sudo, then verify", "signature": "c2ln"},
                text("Using sudo."),
                tool_use("t4", "bash", '{"cmd":"sudo rm -rf build/cache"}'),
                tool_use("t5", "read", '{"path":"build/keep/README"}'),
            ],
            4,
        ),
    )
    b.add("tool_result", result_payload("t5", "keep me"))
    return b.records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--force", action="store_true", help="overwrite existing golden files")
    args = ap.parse_args(argv)
    recs = cli_replay()
    files = {
        args.out / "cli_replay.jsonl": b"".join(r.raw + b"\n" for r in recs),
        args.out / "cli_replay.expected.json": dumps(state_json(fold(recs))).encode("utf-8"),
    }
    existing = [p for p in files if p.exists()]
    if existing and not args.force:
        print(
            "refusing to overwrite existing golden files (review the change, then pass "
            "--force): " + ", ".join(p.name for p in existing),
            file=sys.stderr,
        )
        return 1
    for path, data in files.items():
        path.write_bytes(data)
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
