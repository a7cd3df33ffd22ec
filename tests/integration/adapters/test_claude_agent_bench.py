"""Smoke for bench/bench_claude_agent.py: the three stores run and the JSON report names them
(no timing asserted; the figures are docs/benchmarks.md's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_bench_claude_agent_measures_journald_beside_the_sdk_stores(tmp_path: Path) -> None:
    out = tmp_path / "claude.json"
    args = ["--turns", "25", "--loads", "2", "--sessions", "4", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_claude_agent.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"JournaldSessionStore", "InMemorySessionStore", "JSONL file + fsync"}
    reads = {"append", "load (25 turns)", "load (20 turns)"}
    listings = {"list_sessions (4 sessions)", "list_session_summaries (4 sessions)"}
    assert set(report["JSONL file + fsync"]) == reads  # a file has no listing
    for store in ("JournaldSessionStore", "InMemorySessionStore"):
        assert set(report[store]) == reads | listings
    assert all(r["per_s"] > 0 for ops in report.values() for r in ops.values())
    assert "journald / InMemorySessionStore p50, append" in proc.stdout
