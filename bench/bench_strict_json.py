"""What the daemon's strict parse of a record's JSON field costs, per record, in one run.

    .venv/bin/python bench/bench_strict_json.py     # ~10 s
    (cd /tmp/sj-before && /work/wt/strictjson/.venv/bin/python bench/bench_strict_json.py)

Runs on the tree in the current directory. Prints, for the content JSON of a ~1 KB assistant
record written canonically (what every client sends) and with ``json.dumps``'s default
spaces (a hand-written client): the plain ``json.loads``, the reference strict parser
(``records._strict_json_reference``: repeated-key and constant hooks, surrogate scan; in a
tree without it, ``strict_json`` is that parser), ``records.strict_json`` (the orjson fast
path, which canonical bytes take and other spellings pay for before the reference), and
the whole ``record_from_pb`` + schema check of the canonical record (what the append path
pays per record before the disk), so the parse reads as a share of it.
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from journald_client.pb import journal_pb2 as pb

from journald.core import records
from journald.core.records import GENESIS, strict_json
from journald.core.schema import validate_record
from journald.server.convert import record_from_pb

reference = getattr(records, "_strict_json_reference", strict_json)

BLOCKS = [
    {"type": "text", "text": "let me look at the files " * 6},
    *(
        {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": '{"path": "src/a.py"}'}
        for i in range(6)
    ),
]
CANONICAL = json.dumps(BLOCKS, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
SPACED = json.dumps(BLOCKS).encode()
ROUNDS = 30
RECORD = pb.Record(
    seq=2,
    ts="2026-12-01T09:00:00.000000Z",
    assistant=pb.AssistantPayload(
        message=pb.Message(role="assistant", content_json=CANONICAL),
        iteration=1,
        stop_reason="tool_use",
    ),
)


def per_call_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def main() -> None:
    def build() -> None:
        validate_record(record_from_pb(RECORD, prev=GENESIS, ts=RECORD.ts))

    # interleaved rounds, the fastest of each kept: a shared machine's load hits all alike
    names = ["json.loads", "reference strict parser", "strict_json (this tree)"]
    fns: list[Callable[[bytes], object]] = [
        json.loads,
        lambda d: reference(d, "content_json"),
        lambda d: strict_json(d, "content_json"),
    ]
    best = {(n, k): float("inf") for n in names for k in ("canonical", "spaces")}
    whole = float("inf")
    for _ in range(ROUNDS):
        for text, kind in ((CANONICAL, "canonical"), (SPACED, "spaces")):
            for name, fn in zip(names, fns, strict=True):
                us = per_call_us(lambda fn=fn, text=text: fn(text), 2000)  # type: ignore[misc]
                best[name, kind] = min(best[name, kind], us)
        whole = min(whole, per_call_us(build, 500))
    print(f"content_json: {len(CANONICAL)} bytes canonical, {len(SPACED)} with spaces")
    print(f"{'us per parse':28s} {'canonical':>10s} {'spaces':>10s}")
    for name in names:
        print(f"{name:28s} {best[name, 'canonical']:10.2f} {best[name, 'spaces']:10.2f}")
    now = best["strict_json (this tree)", "canonical"]
    print(f"record_from_pb + schema      {whole:7.2f} us  (strict parse: {now / whole:.0%})")


if __name__ == "__main__":
    main()
