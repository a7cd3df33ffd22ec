"""CI smoke for the benchmark harness: ``bench/run_all.py --quick`` runs end to end and writes
its report. No timing is asserted (CI machines are shared and noisy); a workload whose optional
package is missing is skipped and named in the report, never a failure here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~45 s: every benchmark workload once, at its quick size

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 1200
"""Only a guard against a hung benchmark, never a speed limit: ``--quick`` takes ~45 s on a quiet
machine and outran 240 s with four suites on two cores."""


def bench(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a benchmark script to its end in its own session, so that a hung one is stopped with
    every daemon it started (a plain timeout kills only the script)."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_run_all_quick_writes_a_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = bench(
        [
            str(ROOT / "bench" / "run_all.py"),
            "--quick",
            "--out",
            str(out),
            "--dir",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "benchmarks.md").read_text()
    assert "# journald benchmarks" in report
    assert "## Goals" in report
    assert "raw write+fdatasync" in report  # the limits ran
    assert "journald daemon, unary Append" in report  # the daemon ran


def test_bench_adapters_runs_both_frameworks_against_their_sqlite_savers(tmp_path: Path) -> None:
    out = tmp_path / "adapters.json"
    proc = bench(
        [
            str(ROOT / "bench" / "bench_adapters.py"),
            "--steps",
            "5",
            "--graph-runs",
            "2",
            "--json",
            str(out),
        ]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    results = json.loads(out.read_text())
    assert set(results["langgraph"]) == {"JournaldSaver", "SqliteSaver"}
    assert set(results["agents"]) == {
        "JournaldSession",
        "JournaldSession hold_lease",
        "SQLiteSession",
    }
    assert set(results["graph"]) == {"JournaldSaver", "SqliteSaver"}
    assert set(results["ratio_p50"]) == {"graph step", "add_items", "add_items (hold_lease)"}
    assert "| JournaldSaver | put |" in proc.stdout
    assert "| JournaldSaver | graph step |" in proc.stdout


def test_a_full_report_keeps_the_adapters_section_measured_on_its_own(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from report import ADAPTERS_SECTION, kept_section

    doc = f"# old\n\n## A\nx\n\n{ADAPTERS_SECTION}\n\n| row |\n\n## B\ny\n"
    assert kept_section(doc, ADAPTERS_SECTION) == f"{ADAPTERS_SECTION}\n\n| row |\n"
    assert kept_section("# nothing\n", ADAPTERS_SECTION) == ""


def test_unary_ablation_measures_each_variant_beside_the_echo() -> None:
    variants = ["full", "noop", "no-write", "inline-write", "memory", "io-threads-1", "aio-off"]
    proc = bench(
        [
            str(ROOT / "bench" / "unary_ablation.py"),
            "--variants",
            ",".join(variants),
            "--rounds",
            "1",
            "--seconds",
            "0.5",
        ]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.split("threads (")[0]  # the table, before the per-thread lines
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    for name in ["echo", *variants]:
        assert name in rows, proc.stdout
        assert int(rows[name][1]) > 0, f"{name} answered no call: {proc.stdout}"


def test_every_unary_ablation_patch_still_finds_what_it_replaces() -> None:
    apply_all = (
        "import sys; sys.path.insert(0, 'bench'); import unary_ablation as u; "
        "[patch() for _, patch in u.VARIANTS.values() if patch is not None]; print('patched')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", apply_all],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "patched" in proc.stdout


def test_a_full_report_keeps_every_section_a_script_of_its_own_measured() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from report import kept_headings

    before = "# old\n\n## Goals\nold\n\n## Long runs (bench/x.py)\nrows\n\n## Viewer\nv\n"
    generated = "# new\n\n## Goals\nnew\n"
    # the run's own sections are rewritten; the others are kept, in their order
    assert kept_headings(before, generated) == ["## Long runs (bench/x.py)", "## Viewer"]
    assert kept_headings("", generated) == []
