"""What refusing repeated keys and NaN costs on the append path, per record, in one run.

    .venv/bin/python bench/bench_strict_json.py     # ~5 s

Prints, for the content JSON of a ~1 KB assistant record: the plain ``json.loads`` the
daemon used before, ``records.strict_json`` (repeated-key and constant hooks, surrogate
scan) that it uses now, and the whole ``record_from_pb`` + schema check of the record (what
the append path pays per record before the disk), so the difference reads as a share of it.
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from journald_client.pb import journal_pb2 as pb

from journald.core.records import GENESIS, strict_json
from journald.core.schema import validate_record
from journald.server.convert import record_from_pb

BLOCKS = [
    {"type": "text", "text": "let me look at the files " * 6},
    *(
        {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": '{"path": "src/a.py"}'}
        for i in range(6)
    ),
]
CONTENT = json.dumps(BLOCKS).encode()
ROUNDS = 30
RECORD = pb.Record(
    seq=2,
    ts="2026-12-01T09:00:00.000000Z",
    assistant=pb.AssistantPayload(
        message=pb.Message(role="assistant", content_json=CONTENT),
        iteration=1,
        stop_reason="tool_use",
    ),
)


def per_call_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def main() -> None:
    def build() -> None:
        validate_record(record_from_pb(RECORD, prev=GENESIS, ts=RECORD.ts))

    # interleaved rounds, the fastest of each kept: a shared machine's load hits both alike
    plain = strict = whole = float("inf")
    for _ in range(ROUNDS):
        plain = min(plain, per_call_us(lambda: json.loads(CONTENT), 2000))
        strict = min(strict, per_call_us(lambda: strict_json(CONTENT, "content_json"), 2000))
        whole = min(whole, per_call_us(build, 500))
    print(f"content_json: {len(CONTENT)} bytes")
    print(f"json.loads (before)          {plain:7.2f} us")
    print(f"strict_json (now)            {strict:7.2f} us  ({strict / plain:.2f}x)")
    print(f"record_from_pb + schema      {whole:7.2f} us  (strict parse: {strict / whole:.0%})")
    print(f"added per record             {strict - plain:7.2f} us")


if __name__ == "__main__":
    main()
