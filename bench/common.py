"""Shared pieces of the side-by-side benchmark (bench/run_all.py): statistics, ~1 KB records
in journald's own shapes, fast run builders, machine facts."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECORD_BYTES = 1024
BATCH = 16
TS = "2026-11-30T12:00:00.000000Z"
MAX_SAMPLES = 200_000  # latency samples kept per workload (every call up to this)


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of unsorted samples; NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def summarize(
    name: str, lat_s: list[float], records: int, wall_s: float, **extra: Any
) -> dict[str, Any]:
    """One result row: latency per call in ms, records/s over the measured wall time."""
    return {
        "name": name,
        "p50_ms": pct(lat_s, 50) * 1e3,
        "p99_ms": pct(lat_s, 99) * 1e3,
        "mean_ms": (sum(lat_s) / len(lat_s) * 1e3) if lat_s else float("nan"),
        "rate": records / wall_s if wall_s > 0 else 0.0,
        "calls": len(lat_s),
        "records": records,
        "wall_s": wall_s,
        "cdf": cdf_points(lat_s),
        **extra,
    }


def cdf_points(lat_s: list[float], points: int = 200) -> list[float]:
    """Latency (ms) at ``points`` evenly spaced quantiles, enough to draw a CDF."""
    if not lat_s:
        return []
    s = sorted(lat_s)
    n = len(s)
    return [s[min(n - 1, round(i / (points - 1) * (n - 1)))] * 1e3 for i in range(points)]


# --- journald records of ~1 KB ------------------------------------------------------------


def pad_text(target: int, overhead: int) -> str:
    return "x" * max(1, target - overhead)


def assistant_content(seq: int, size: int = RECORD_BYTES) -> list[dict[str, Any]]:
    """An assistant turn: some text and one tool call, padded so the record is ~``size``."""
    return [
        {"type": "text", "text": pad_text(size, 400)},
        {"type": "tool_use", "id": f"toolu_{seq}", "name": "read", "input": '{"path":"a.txt"}'},
    ]


def result_content(size: int = RECORD_BYTES) -> list[dict[str, Any]]:
    return [{"type": "text", "text": pad_text(size, 260)}]


USAGE = {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0, "cache_creation_tokens": 0}


def record_payload(seq: int, size: int = RECORD_BYTES) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of record ``seq`` (>= 2) of a bench run: even seqs are assistant turns
    that call one tool, odd seqs answer the call of the record before."""
    if seq % 2 == 0:
        return "assistant", {
            "message": {"role": "assistant", "content": assistant_content(seq, size)},
            "iteration": seq // 2,
            "stop_reason": "tool_use",
            "usage": dict(USAGE),
        }
    return "tool_result", {
        "tool_use_id": f"toolu_{seq - 1}",
        "content": result_content(size),
        "is_error": False,
        "remote": False,
    }


def client_json(value: object) -> bytes:
    """JSON text as every client writes its ``content_json`` fields: canonical (sorted keys,
    compact, UTF-8; journald_client.fingerprint.canonical_json, clients/go/canonical.go,
    clients/ts/src/canonical.ts), the form the daemon's strict parser takes fastest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_pb(pb: Any, seq: int) -> Any:
    """Record ``seq`` of a bench run as the ``journal_pb2.Record`` a client sends (``pb``: the
    generated module, imported by the caller so this module needs no gRPC)."""
    kind, p = record_payload(seq)
    if kind == "assistant":
        m = p["message"]
        return pb.Record(
            seq=seq,
            ts=TS,
            assistant=pb.AssistantPayload(
                message=pb.Message(role=m["role"], content_json=client_json(m["content"])),
                iteration=p["iteration"],
                stop_reason=p["stop_reason"],
                usage=pb.Usage(**p["usage"]),
            ),
        )
    return pb.Record(
        seq=seq,
        ts=TS,
        tool_result=pb.ToolResultPayload(
            tool_use_id=p["tool_use_id"], content_json=client_json(p["content"])
        ),
    )


class RunWriter:
    """Writes a whole run through the file backend's own writer (``FileJournal.append`` in
    batches: one write + fdatasync per batch), building canonical bytes from a template so a
    1M-record run does not spend minutes in ``json.dumps``. The first records are checked
    byte for byte against ``make_record``."""

    def __init__(self, size: int = RECORD_BYTES) -> None:
        from journald.core.records import GENESIS, make_record

        self.size = size
        self._tmpl: dict[int, tuple[str, str]] = {}
        for parity, seq in ((0, 777777770), (1, 777777771)):
            kind, payload = record_payload(seq, size)
            rec = make_record(seq, kind, payload, GENESIS, TS)
            text = rec.raw.decode().replace("%", "%%")
            text = text.replace(GENESIS, "%(prev)s")
            text = text.replace(f'"seq":{seq}', '"seq":%(seq)d')
            text = text.replace(f"toolu_{seq - parity}", "toolu_%(tid)d")
            text = text.replace(f'"iteration":{seq // 2}', '"iteration":%(it)d')
            self._tmpl[parity] = (kind, text)

    def record(self, seq: int, prev: str) -> Any:
        from journald.core.records import Record, sha256_hex

        kind, text = self._tmpl[seq % 2]
        tid = seq if seq % 2 == 0 else seq - 1
        raw = (text % {"prev": prev, "seq": seq, "tid": tid, "it": seq // 2}).encode()
        _, payload = record_payload(seq, self.size)
        return Record(seq, kind, TS, prev, payload, None, raw, sha256_hex(raw))

    def check(self) -> None:
        from journald.core.records import GENESIS, make_record

        prev = GENESIS
        for seq in range(2, 6):
            kind, payload = record_payload(seq, self.size)
            want = make_record(seq, kind, payload, prev, TS)
            got = self.record(seq, prev)
            if got.raw != want.raw:
                raise AssertionError(f"template record {seq} differs from make_record")
            prev = want.hash

    async def write(self, store: Any, run_id: str, records: int, batch: int = 1000) -> None:
        """Create ``run_id`` with ``records`` records (meta included)."""
        from journald.core.records import GENESIS, make_record
        from tests.builders import meta_payload

        journal = await store.create(make_record(1, "meta", meta_payload(run_id), GENESIS, TS))
        prev, seq = journal.last_hash, 2
        try:
            while seq <= records:
                chunk = []
                for s in range(seq, min(records, seq + batch - 1) + 1):
                    rec = self.record(s, prev)
                    chunk.append(rec)
                    prev = rec.hash
                await journal.append(chunk)
                seq = chunk[-1].seq + 1
        finally:
            await journal.close()


def write_fdatasync_loop(
    path: Path,
    keep_going: Callable[[int], bool],
    data: bytes = b"x" * (RECORD_BYTES - 1) + b"\n",
    gap_s: float = 0.0,
) -> list[float]:
    """The disk's limit for one writer: ``pwrite`` of ``data`` at the end of a new file +
    ``fdatasync`` (what the file store does per commit), while ``keep_going(writes so far)``,
    ``gap_s`` of idle before each; returns each write's latency in seconds. The file is
    removed afterwards."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    lat: list[float] = []
    offset = 0
    try:
        while keep_going(len(lat)):
            if gap_s:
                time.sleep(gap_s)
            t0 = time.perf_counter()
            offset += os.pwrite(fd, data, offset)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return lat


def run_bytes(run_dir: Path) -> int:
    return sum(p.stat().st_size for p in run_dir.rglob("*.jsonl"))


# --- machine facts --------------------------------------------------------------------------


def _cmd(*argv: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts(bench_dir: Path) -> dict[str, Any]:
    import sqlite3

    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mount = _cmd("findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "-T", str(bench_dir))
    usage = shutil.disk_usage(bench_dir)
    dev = mount.split()[0] if mount else ""
    rota = ""
    if dev.startswith("/dev/"):
        name = os.path.basename(dev)
        rot = Path(f"/sys/block/{name}/queue/rotational")
        if rot.exists():
            rota = "rotational" if rot.read_text().strip() == "1" else "non-rotational"
    nats = ""
    try:
        from tests.nats_server import nats_server_binary

        nats = _cmd(nats_server_binary(), "--version")
    except Exception:
        nats = "not found"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "disk": f"{mount} ({usage.total / 2**30:.0f} GiB{', ' + rota if rota else ''})",
        "bench_dir": str(bench_dir),
        "kernel": platform.release(),
        "os": _cmd("sh", "-c", ". /etc/os-release 2>/dev/null && echo $PRETTY_NAME"),
        "python": platform.python_version(),
        "grpcio": _version("grpcio"),
        "protobuf": _version("protobuf"),
        "uvloop": _version("uvloop"),
        "nats-py": _version("nats-py"),
        "nats-server": nats,
        "sqlite": sqlite3.sqlite_version,
        "langgraph-checkpoint-sqlite": _version("langgraph-checkpoint-sqlite"),
        "openai-agents": _version("openai-agents"),
    }


def busy_processes(limit: int = 5) -> list[str]:
    """The processes using the most CPU right now (``ps``), to show what else was running."""
    out = _cmd("ps", "-eo", "pid,pcpu,args", "--sort=-pcpu", "--no-headers")
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[0] == str(os.getpid()) or parts[2].startswith("ps "):
            continue
        try:
            if float(parts[1]) >= 5.0:
                rows.append(f"`{parts[2][:70]}` {parts[1]}%")
        except ValueError:
            continue
    return rows[:limit]


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)


def print_round(
    r: int, floor_text: str, p50: dict[str, float], ratios: dict[str, list[float]]
) -> None:
    """One round of a p50 goal script: the floor's parts, then each daemon's p50 and ratio."""
    daemons = "; ".join(
        f"{t} daemon Append p50 {p50[t]:.2f} ms ({xs[-1]:.2f}x)" for t, xs in ratios.items()
    )
    print(f"round {r + 1}: {floor_text}; {daemons}", flush=True)


def print_medians(ratios: dict[str, list[float]], goal: float = 1.25) -> None:
    """The median of each daemon's ratios over the rounds, against the goal."""
    for t, xs in ratios.items():
        print(
            f"{t}: median ratio {statistics.median(xs):.2f}x over {len(xs)} rounds (goal <= {goal})"
        )


def medians(ratios: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Each daemon's ratios over the rounds and their median, as data (``--json``)."""
    return {t: {"rounds": xs, "median": statistics.median(xs)} for t, xs in ratios.items()}
