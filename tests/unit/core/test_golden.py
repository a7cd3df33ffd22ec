"""Golden journals: re-fold every checked-in journal and compare with its checked-in
expectation. This test never writes to tests/golden (regenerate by hand with
``python -m tests.golden.make_golden --force`` only for a reviewed change of behaviour)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from journald.core import errors, records
from journald.core.fold import fold
from tests.golden import make_golden

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
REQUIRED = {
    "completed_run",
    "pending_tool_batch",
    "paused_turn",
    "follow_up_merge",
    "rebase_compaction",
    "error_tool_result",
    "future_version",
    "framework_state",
}
NAMES = sorted(p.name.removesuffix(".jsonl") for p in GOLDEN.glob("*.jsonl"))


def _outcome(lines: list[bytes]) -> dict[str, Any]:
    recs: list[records.Record] = []
    for n, line in enumerate(lines, 1):
        try:
            rec = records.decode(line)
        except errors.JournaldError as exc:
            return {"error": {"code": exc.code, "class": type(exc).__name__, "line": n}}
        expected_prev = recs[-1].hash if recs else records.GENESIS
        assert rec.prev == expected_prev, f"line {n}: broken hash chain"
        recs.append(rec)
    return make_golden.state_json(fold(recs))


def test_every_required_golden_case_is_checked_in_with_its_expectation() -> None:
    assert set(NAMES) >= REQUIRED
    for name in NAMES:
        assert (GOLDEN / f"{name}.expected.json").is_file(), name


@pytest.mark.parametrize("name", NAMES)
def test_golden_journal_folds_to_its_checked_in_expectation(name: str) -> None:
    raw = (GOLDEN / f"{name}.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    expected_text = (GOLDEN / f"{name}.expected.json").read_text("utf-8")
    got = _outcome(raw.split(b"\n")[:-1])
    got_text = make_golden.dumps(got)
    if got != json.loads(expected_text):
        diff = "".join(
            difflib.unified_diff(
                expected_text.splitlines(keepends=True),
                got_text.splitlines(keepends=True),
                f"{name}.expected.json",
                "fold of today",
            )
        )
        pytest.fail(f"golden {name} changed:\n{diff}")


def test_future_format_version_golden_raises_the_typed_error() -> None:
    line = (GOLDEN / "future_version.jsonl").read_bytes().split(b"\n")[1]
    assert json.loads(line)["v"] == 2
    with pytest.raises(errors.VersionUnsupported) as info:
        records.decode(line)
    assert info.value.code == "version_unsupported"
    assert "2" in info.value.message


def test_golden_generator_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert make_golden.main(["--out", str(tmp_path)]) == 0
    victim = tmp_path / "completed_run.expected.json"
    victim.write_text("hand-edited\n")
    assert make_golden.main(["--out", str(tmp_path)]) == 1
    assert victim.read_text() == "hand-edited\n"
    assert make_golden.main(["--out", str(tmp_path), "--force"]) == 0
    assert victim.read_text() != "hand-edited\n"
