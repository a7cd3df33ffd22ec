"""Run format identity across releases (docs/design.md#format-identity): a run of a newer
format is refused unchanged, and the release before line framing, served on a run this
daemon appended to, refuses it instead of cutting the framed line and acknowledging other
bytes at its seq."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import journald_client as jc
import pytest

from journald.storage.file.segments import MANIFEST, RUN_FORMAT
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

ROOT = Path(__file__).resolve().parents[3]
PRE_FRAMING = "82cf890"
"""The last commit before line framing (7c9d66d, "per-line checksum framing"): the release
a downgrade from this one goes back to."""

OLD_CLIENT = """
import json, sys
import journald_client as jc

socket, run_id, mode = sys.argv[1:4]
fp = jc.compute(
    provider="anthropic",
    model="claude-test",
    system_prompt=["You are a careful agent."],
    tools=[{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
    thinking="off",
    max_tokens=1024,
    max_iterations=50,
)
out = {}
client = jc.connect(socket, reconnect_timeout=2.0)
try:
    if mode == "create":
        run = client.start(run_id, fp, "hello from the old release")
        out["acks"] = [run.user(f"old {i}").seq for i in range(3)]
    else:
        run = client.resume(run_id, fp)
        out["acks"] = [run.user("written by the old release after the new one").seq]
    run.close()
except jc.JournaldError as exc:
    out["error"] = exc.code
    out["message"] = str(exc)
try:
    out["listed"] = [r.run_id for r in client.list()]
except jc.JournaldError as exc:
    out["list_error"] = exc.code
print(json.dumps(out))
"""


def files_of(run_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, int]]:
    """Every file below ``run_dir``: its bytes and mtime."""
    out = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and path.name not in skip:
            out[str(path.relative_to(run_dir))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def records_of(client: jc.Client, run_id: str) -> list[tuple[int, str]]:
    return [(r.seq, r.hash) for r in client.load(run_id)]


def test_a_run_of_a_newer_format_is_refused_by_name_and_left_unchanged(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=2)
        run = client.start("next-release", FP, "hi")
        run.user("before the upgrade")
        run.close()
        run_dir = daemon.data_dir / "sessions" / "next-release"
        manifest = json.loads((run_dir / MANIFEST).read_text())
        assert manifest["format"] == f"journald-manifest/{RUN_FORMAT}"
        # what the next release would leave: the same run, in run format RUN_FORMAT + 1
        manifest["format"] = f"journald-manifest/{RUN_FORMAT + 1}"
        (run_dir / MANIFEST).write_text(json.dumps(manifest))
        before = files_of(run_dir)

        with pytest.raises(jc.VersionUnsupported) as refused:
            client.resume("next-release", FP)
        err = refused.value
        assert err.metadata["version"] == str(RUN_FORMAT + 1)
        assert err.metadata["supported"] == str(RUN_FORMAT)
        assert f"run format {RUN_FORMAT + 1}" in err.message
        assert f"1 to {RUN_FORMAT}" in err.message
        for read in (lambda r: list(client.load(r)), client.verify, client.fold, client.recover):
            with pytest.raises(jc.VersionUnsupported):
                read("next-release")
        with pytest.raises(jc.SessionExists):  # still there: never created over
            client.start("next-release", FP, "hi")
        (row,) = [r for r in client.list() if r.run_id == "next-release"]
        assert f"run format {RUN_FORMAT + 1}" in row.error
        assert files_of(run_dir) == before  # nothing written, not even the lock file
        client.close()


@pytest.fixture(scope="module")
def pre_framing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release before line framing, extracted from this repository's history."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{PRE_FRAMING}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"commit {PRE_FRAMING} is not in this clone (a shallow checkout)")
    tree = tmp_path_factory.mktemp("pre-framing")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PRE_FRAMING], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def old_env(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'clients' / 'python'}"}


def old_client(tree: Path, daemon: Daemon, run_id: str, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", OLD_CLIENT, str(daemon.socket), run_id, mode],
        cwd=tree,
        env={**os.environ, **old_env(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class OldDaemon(Daemon):
    """The release before line framing: it has no scrubber, so it takes no scrub flags."""

    def scrub_off(self) -> list[str]:
        return []


def test_the_release_before_line_framing_refuses_a_run_this_release_appended_to(
    tmp_path: Path, pre_framing: Path
) -> None:
    data = tmp_path / "data"
    run_id = "downgraded"

    def old_daemon() -> Daemon:
        return OldDaemon(tmp_path, "file", data_dir=data, env=old_env(pre_framing), cwd=pre_framing)

    with old_daemon() as old:
        made = old_client(pre_framing, old, run_id, "create")
        assert made.get("acks") == [2, 3, 4], made

    with Daemon(tmp_path, "file", data_dir=data) as new:  # the upgrade
        client = jc.Client(str(new.socket), reconnect_timeout=2)
        run = client.resume(run_id, FP)
        assert run.user("written by this release").seq == 5
        run.close()
        client.start("fresh", FP, "made by this release").close()  # one framed line
        acknowledged = records_of(client, run_id)
        client.close()
    run_dir = data / "sessions" / run_id
    before = files_of(run_dir, skip=("journal.lock",))
    fresh_before = files_of(data / "sessions" / "fresh", skip=("journal.lock",))

    with old_daemon() as old:  # the downgrade
        refused = old_client(pre_framing, old, run_id, "resume")
        # unstamped, a run of one framed line reads as no run at all to it (its only line
        # taken for a torn write): listed nowhere, "not found" on resume
        fresh = old_client(pre_framing, old, "fresh", "resume")
    assert "acks" not in refused, refused
    assert refused["error"] == "store_corrupted", refused
    assert f"journald-manifest/{RUN_FORMAT}" in str(refused["message"])
    assert refused["list_error"] == "store_corrupted"  # its listing refuses the run too
    stamped = json.loads((run_dir / MANIFEST).read_text())["format"]
    assert stamped == f"journald-manifest/{RUN_FORMAT}"  # written before the framed line
    assert fresh.get("error") == "store_corrupted", fresh
    # the old release rewrites only its lock file's holder line
    assert files_of(run_dir, skip=("journal.lock",)) == before
    assert files_of(data / "sessions" / "fresh", skip=("journal.lock",)) == fresh_before

    with Daemon(tmp_path, "file", data_dir=data) as new:  # and back
        client = jc.Client(str(new.socket), reconnect_timeout=2)
        assert records_of(client, run_id) == acknowledged
        assert client.verify(run_id).last_seq == 5
        assert client.verify("fresh").last_seq == 1
        client.close()
