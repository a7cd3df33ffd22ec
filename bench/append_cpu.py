"""Daemon CPU per append, in process: ``JournalService._append`` of one ~1 KB user record, N
times, on the memory backend, after an Open through ``JournalService._open`` (no gRPC, no disk),
so what it prints is the daemon's own bookkeeping per append (decode, gate, admission, fold,
queue, publish, ack). Compare two trees with the same interpreter::

    PYTHONPATH=/tmp/old:/tmp/old/clients/python:/tmp/old/proto/python \\
        .venv/bin/python bench/append_cpu.py old 4000
    .venv/bin/python bench/append_cpu.py new 4000

(alternate them a few times: on a shared machine a single run varies by 20 %).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from journald_client.pb import journal_pb2 as pb

from journald.server.service import JournalService
from journald.storage.memory import MemoryStore


class _Context:
    def peer(self) -> str:
        return "unix:"

    def invocation_metadata(self) -> tuple[Any, ...]:
        return ()


async def cpu_per_append_us(n: int) -> float:
    svc = JournalService(MemoryStore())
    fp = pb.Fingerprint(provider="p", model="m", system_prompt_sha256="0" * 64)
    fp.tools_sha256 = "0" * 64
    req = pb.OpenRequest(
        run_id="bench",
        fingerprint=fp,
        prompt_json=b'[{"type":"text","text":"hi"}]',
        created="2026-01-01T00:00:00.000000Z",
    )
    opened = svc._open(req, _Context())  # type: ignore[arg-type]
    first = await opened.__anext__()
    content = json.dumps([{"text": "x" * 900, "type": "text"}], separators=(",", ":")).encode()
    t0 = time.process_time()
    for i in range(n):
        rec = pb.Record(
            seq=i + 2, ts="2026-01-01T00:00:01.000000Z", user=pb.UserPayload(content_json=content)
        )
        await svc._append(
            pb.AppendRequest(run_id="bench", lease_id=first.lease.lease_id, records=[rec])
        )
    spent = time.process_time() - t0
    await opened.aclose()  # type: ignore[attr-defined]
    return spent / n * 1e6


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this tree"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    print(f"{label}: {asyncio.run(cpu_per_append_us(n)):.1f} us CPU per append")


if __name__ == "__main__":
    main()
