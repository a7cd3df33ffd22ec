"""`journald migrate` never copies a data dir that a running daemon is writing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.daemon import JOURNALD, Daemon


def test_migrate_refuses_a_data_dir_held_by_a_running_daemon(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as d:
        proc = subprocess.run(
            [
                *JOURNALD,
                "migrate",
                "--quiet",
                "--from",
                f"file:{d.data_dir}",
                "--to",
                f"file:{tmp_path / 'copy'}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 3
    assert f"pid {d.pid}" in proc.stderr
    assert "stop it first" in proc.stderr
    assert "--data-dir" not in proc.stderr  # a flag migrate does not have
    assert not (tmp_path / "copy" / "sessions").exists()
