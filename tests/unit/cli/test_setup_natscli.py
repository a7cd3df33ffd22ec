"""scripts/setup_natscli.sh: the pinned natscli is built once, and a machine without Go gets a
clear refusal instead of a test that cannot find `nats`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.natscli import SETUP, pinned_version


def run_setup(root: Path, path_dirs: list[Path]) -> subprocess.CompletedProcess[str]:
    """Run a copy of the script as if ``root`` were the checkout, with only ``path_dirs``."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, root / "scripts" / SETUP.name)
    env = {"PATH": os.pathsep.join(map(str, path_dirs)), "HOME": str(root)}
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(root / "scripts" / SETUP.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def basic_tools(into: Path) -> Path:
    """A PATH directory with the few commands the script needs before it looks for go."""
    into.mkdir()
    for tool in ("dirname", "mkdir", "cat"):
        found = shutil.which(tool)
        assert found, f"{tool} is missing on this machine"
        (into / tool).symlink_to(found)
    return into


def test_without_go_it_refuses_naming_go_and_the_pinned_version(tmp_path: Path) -> None:
    done = run_setup(tmp_path / "repo", [basic_tools(tmp_path / "bin")])
    assert done.returncode == 2, done.stderr
    assert "'go' is not installed" in done.stderr
    assert pinned_version() in done.stderr


def test_an_installed_binary_of_the_pinned_version_is_kept(tmp_path: Path) -> None:
    fake = tmp_path / "repo" / ".tools" / "bin" / "nats"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho {pinned_version()}\n")
    fake.chmod(0o755)
    done = run_setup(tmp_path / "repo", [basic_tools(tmp_path / "bin")])  # no go: not needed
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
