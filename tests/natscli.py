"""The real ``nats`` CLI (natscli), pinned, for tests that run the commands journald prints.

``natscli_binary`` returns ``.tools/bin/nats`` at the version pinned in
scripts/setup_natscli.sh, building it with that script (from the Go module proxy) the first
time; a file lock keeps parallel test workers from building it twice. Without ``go`` the test
fails with the script's message: go is required by ``make test`` (the Go client) anyway.
``printed_commands`` finds the command lines in a printed message and ``run_printed`` runs
one (``nats ...`` or ``journald ...``) as a subprocess, with a private natscli config dir so
no user context changes its target.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup_natscli.sh"
BINARY = ROOT / ".tools" / "bin" / "nats"
BUILD_TIMEOUT_S = 1500


def pinned_version() -> str:
    m = re.search(r"^NATSCLI_VERSION=(\S+)$", SETUP.read_text(), re.MULTILINE)
    assert m, f"no NATSCLI_VERSION in {SETUP}"
    return m.group(1)


def _installed_version() -> str:
    try:
        done = subprocess.run(
            [str(BINARY), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return ""
    return (done.stdout + done.stderr).strip()


def natscli_binary() -> str:
    want = pinned_version()
    if _installed_version() == want:
        return str(BINARY)
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    with open(BINARY.parent.parent / "natscli.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building it
        if _installed_version() != want:
            done = subprocess.run(
                [str(SETUP)],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                pytest.fail(
                    f"cannot build natscli {want} with {SETUP.relative_to(ROOT)} "
                    f"(exit {done.returncode}):\n{done.stderr.strip()}",
                    pytrace=False,
                )
    got = _installed_version()
    assert got == want, f"{BINARY} reports {got!r}, want {want}"
    return str(BINARY)


def printed_commands(text: str) -> list[str]:
    """Every command line a message prints: on a line of its own (indented) or quoted in
    backticks, in order."""
    found: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and line.strip().split(" ", 1)[0] in ("nats", "journald"):
            found.append(line.strip())
    found += re.findall(r"`((?:nats|journald) [^`]+)`", text)
    return list(dict.fromkeys(found))


def printed_env(home: Path, nats_url: str | None = None) -> dict[str, str]:
    """The environment of a pasted command: no NATS_* of the caller's, a private natscli
    config dir (no user context), ``NATS_URL`` when given (natscli's default server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    if nats_url is not None:
        env["NATS_URL"] = nats_url
    return env


def run_printed(
    command: str,
    natscli: str,
    home: Path,
    cwd: Path | None = None,
    timeout_s: float = 120,
    nats_url: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command line journald printed, exactly as a shell would split it."""
    argv = shlex.split(command)
    if argv[0] == "nats":
        argv[0] = natscli
    elif argv[0] == "journald":
        argv = [sys.executable, "-m", "journald.cli", *argv[1:]]
    else:
        raise AssertionError(f"unexpected printed command {command!r}")
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=printed_env(home, nats_url),
    )


def run_all(
    commands: list[str],
    natscli: str,
    home: Path,
    cwd: Path | None = None,
    nats_url: str | None = None,
) -> None:
    assert commands, "no command to run"
    for command in commands:
        done = run_printed(command, natscli, home, cwd, nats_url=nats_url)
        assert done.returncode == 0, f"`{command}` failed:\n{done.stdout}\n{done.stderr}"
