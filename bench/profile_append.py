"""Profile the daemon's append path with py-spy while agents append, and summarize it.

``start(pid, seconds, out)`` runs ``py-spy record --threads --format raw`` against the daemon
(on-CPU samples only); ``summarize`` turns the collapsed stacks into shares of the event-loop
thread's samples (by category and by leaf function) and of the writer threads' samples;
``stage_costs`` times each step of the append path in-process, per record.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<fn>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")

# First matching rule (checked leaf to root) names the category of a sample.
CATEGORIES: list[tuple[str, str]] = [
    ("fdatasync / write (writer thread)", r"_write_durable|fdatasync|write_all"),
    (
        "syscalls: socket send/receive (sendmsg, recvmsg)",
        r"^(sendmsg|recvmsg|recv|send|__libc_sendmsg|__libc_recvmsg|writev|readv) \(",
    ),
    (
        "syscalls: write/read (eventfd wake-ups, pipes)",
        r"^(write|read|__libc_write|__libc_read|eventfd_write) \(",
    ),
    ("syscalls: epoll", r"epoll"),
    (
        "thread hand-offs (futex, condition variables, semaphores)",
        r"sem_post|sem_wait|pthread_cond|futex|^syscall \(",
    ),
    (
        "validation (schema)",
        r"validate_record|schema_predicate|jsonschema|validators\.py|_keywords",
    ),
    (
        "record_from_pb / canonical JSON / sha256",
        r"record_from_pb|canonical_json|make_record"
        r"|payload_from_pb|sha256",
    ),
    ("fold / admit", r"fold_into|_apply|admit"),
    ("telemetry (spans)", r"telemetry|opentelemetry"),
    ("store append (queue, futures)", r"storage/file\.py|FileJournal|_flush|append \("),
    ("leases / turnstile", r"leases\.py|turnstile|wait_for"),
    ("gRPC (cygrpc, aio server)", r"grpc|cygrpc|_server\.py|aio"),
    ("protobuf", r"protobuf|_pb2|SerializeToString|FromString"),
    ("native: uvloop + gRPC core (no Python frame)", r"Runner\.run|uvloop"),
]


def pyspy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def start(
    pid: int, seconds: float, out: Path, rate: int = 250, native: bool = True
) -> subprocess.Popen[bytes]:
    """``py-spy record`` of ``pid``; ``native`` adds C frames (syscalls, gRPC core) and then
    pauses the process for each sample (py-spy cannot unwind native stacks otherwise)."""
    exe = pyspy()
    if exe is None:
        raise RuntimeError("py-spy is not installed (bench/requirements.txt)")
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--threads",
            "--native" if native else "--nonblocking",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process (or of one of its threads) from /proc."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _frames(stack: str) -> list[str]:
    return [f for f in stack.split(";") if f]


def summarize(path: Path, top: int = 12) -> dict[str, Any]:
    loop_total = 0
    writer_total = 0
    cats: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    writer: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = _frames(stack)
        thread = frames[1] if len(frames) > 1 and frames[0].startswith("process") else frames[0]
        body = [f for f in frames if FRAME.match(f)]
        if "journald-writer" in thread or any("_work (journald/storage" in f for f in body):
            writer_total += count
            writer[_short(body[-1]) if body else "(native)"] += count
            continue
        if "MainThread" not in thread and "main" not in thread.lower():
            continue
        loop_total += count
        leaf = body[-1] if body else "(native)"
        leaves[_short(leaf)] += count
        cats[_category(body)] += count
    return {
        "loop_samples": loop_total,
        "writer_samples": writer_total,
        "categories": [(k, v / loop_total) for k, v in cats.most_common()] if loop_total else [],
        "leaves": [(k, v / loop_total) for k, v in leaves.most_common(top)] if loop_total else [],
        "writer": [(k, v / writer_total) for k, v in writer.most_common(5)] if writer_total else [],
    }


def _short(frame: str) -> str:
    m = FRAME.match(frame)
    if not m:
        return frame
    file = m.group("file")
    parts = Path(file).parts
    if "site-packages" in parts:
        file = "/".join(parts[parts.index("site-packages") + 1 :])
    elif "journald" in parts:
        file = "/".join(parts[parts.index("journald") :])
    return f"{m.group('fn')} ({file})"


def _category(body: list[str]) -> str:
    for frame in reversed(body):
        for name, pattern in CATEGORIES:
            if re.search(pattern, frame):
                return name
    return "other"


def stage_costs(n: int = 2000) -> list[tuple[str, float]]:
    """CPU cost per record (µs) of each step of ``JournalService._append`` for the bench's
    ~1 KB records, measured in this process on the same code (no RPC, no disk).

    The collector is set up as the daemon sets it up (``tune_gc``): otherwise collections of
    this harness's own heap (every latency of the run so far) land on whichever step
    allocates, and the figures say more about the harness than about the append path."""
    import gc
    import time

    from journald.server.daemon import tune_gc

    gc.collect()
    tune_gc()

    from journald_client.pb import journal_pb2 as pb

    from journald.core.admission import admit
    from journald.core.fold import RunState, fold_into
    from journald.core.records import GENESIS, make_record
    from journald.core.schema import validate_record
    from journald.server.convert import record_from_pb
    from journald.server.runs import ack_pb
    from journald.storage.base import AppendResult
    from tests.builders import meta_payload

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from agent_procs import Journald

    builder = Journald.__new__(Journald)
    builder.pb = pb
    reqs = [
        pb.AppendRequest(run_id="r", lease_id="l", records=[builder.record(s)]).SerializeToString()
        for s in range(2, n + 2)
    ]
    state = fold_into(RunState(), [make_record(1, "meta", meta_payload("r"), GENESIS, "t")])
    t: dict[str, float] = dict.fromkeys(
        (
            "parse AppendRequest (protobuf)",
            "record_from_pb (canonical JSON + sha256)",
            "validate_record (compiled schema predicate)",
            "admit + fold_into",
            "ack + serialize response",
        ),
        0.0,
    )
    keys = list(t)
    prev = state.last_hash
    for raw in reqs:
        t0 = time.perf_counter()
        req = pb.AppendRequest.FromString(raw)
        t1 = time.perf_counter()
        rec = record_from_pb(req.records[0], prev=prev, ts=req.records[0].ts)
        t2 = time.perf_counter()
        validate_record(rec)
        t3 = time.perf_counter()
        admit(state, [rec])
        fold_into(state, [rec])
        t4 = time.perf_counter()
        pb.AppendResponse(
            acks=[ack_pb(AppendResult(rec.seq, rec.hash, "fsync_local"))]
        ).SerializeToString()
        t5 = time.perf_counter()
        prev = rec.hash
        for k, a, b in zip(keys, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5), strict=True):
            t[k] += b - a
    return [(k, v / n * 1e6) for k, v in t.items()]
