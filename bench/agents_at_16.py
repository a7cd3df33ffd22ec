"""Issue 27's throughput goals at 16 agent processes, in one run: the no-op echo, unary Append
and the Python pipelined writer (window 16) against this tree's daemon and, with ``--before``,
an older tree's, beside SQLite WAL synchronous=FULL (bench/agent_procs.py runs each system).

    .venv/bin/python bench/agents_at_16.py --before /tmp/old-tree   # git archive of a commit

Prints records/s per system and the goal ratios: stream / SQLite FULL (goal >= 2) and unary /
echo (goal >= 0.8).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT
from cpu_per_record import echo_server

AGENTS = 16


def agents(work: Path, system: str, target: str, tag: str, seconds: float) -> float:
    """Records/s of ``AGENTS`` agent processes of ``system``."""
    d = work / tag
    d.mkdir()
    spec = {
        "system": system,
        "agents": AGENTS,
        "procs": AGENTS,
        "seconds": seconds,
        "dir": str(d),
        "target": target,
        "tag": tag,
        "out": str(d / "result.json"),
        "stream_prefix": "",
    }
    (d / "spec.json").write_text(json.dumps(spec))
    argv = [sys.executable, str(ROOT / "bench" / "agent_procs.py"), str(d / "spec.json")]
    subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=seconds + 180, check=False)
    result: dict[str, Any] = json.loads((d / "result.json").read_text())
    if result["errors"]:
        raise RuntimeError(f"{tag}: {result['errors'][0]}")
    return float(result["records"]) / float(result["wall"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="an older tree's code")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    from tests.daemon import Daemon

    work = Path(tempfile.mkdtemp(prefix="jd-a16-"))
    (work / "after").mkdir()
    old: contextlib.AbstractContextManager[Daemon | None] = contextlib.nullcontext(None)
    if args.before is not None:
        (work / "before").mkdir()
        old = Daemon(work / "before", "file", cwd=args.before.resolve())
    rates: dict[str, float] = {}
    with echo_server(work) as (_, echo), old as before, Daemon(work / "after", "file") as after:
        rates["echo"] = agents(work, "echo", echo, "echo", args.seconds)
        for when, d in (("before", before), ("after", after)):
            if d is None:
                continue
            for system in ("unary", "stream"):
                name = f"{system} ({when})"
                rates[name] = agents(work, system, d.target, f"{system}-{when}", args.seconds)
        rates["sqlite FULL"] = agents(work, "sqlite", "", "sqlite", args.seconds)
    print(f"\n{AGENTS} agent processes, {args.seconds:.0f} s each, file backend, ~1 KB records")
    for name, rate in rates.items():
        print(f"  {name:16} {rate:8.0f} rec/s")
    goals: dict[str, dict[str, float]] = {}
    for when in ("before", "after"):
        if f"stream ({when})" in rates:
            stream = rates[f"stream ({when})"] / rates["sqlite FULL"]
            unary = rates[f"unary ({when})"] / rates["echo"]
            goals[when] = {"stream_vs_sqlite_full": stream, "unary_vs_echo": unary}
            print(
                f"{when}: stream / SQLite FULL {stream:.2f} (goal >= 2); "
                f"unary / echo {unary:.2f} (goal >= 0.8)"
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"records_per_s": rates, "goals": goals}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
