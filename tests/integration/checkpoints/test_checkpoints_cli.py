"""The checkpoint CLI commands as their own processes against a real daemon."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.checkpoints.test_large_exports import thirty_file_reads
from tests.integration.clientbin.common import FP
from tests.integration.rpc import Lease, stub, until_unlocked

CLI = [sys.executable, "-m", "journald.cli"]


def cli(d: Daemon, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_the_checkpoint_commands_take_list_export_import_restore_compact_fork_and_page(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        s = stub(d.target)
        lease = Lease(s, "cli-cp")
        for i in range(3):
            lease.append(lease.assistant(f"c{i}"))
            lease.append(lease.result(f"c{i}"))
        lease.append(lease.assistant())
        lease.close()
        other = Lease(s, "cli-other", prompt="other")
        other.close()

        cp = json.loads(
            until_unlocked(lambda: cli(d, "checkpoint", "cli-cp", "--label", "x", "--json")).stdout
        )
        assert cp["trigger"] == "manual"
        assert cp["message_count"] == 8
        listed = cli(d, "checkpoints", "cli-cp").stdout
        assert cp["checkpoint_id"] in listed
        assert "manual" in listed

        out = tmp_path / "cp.json"
        cli(d, "export", "cli-cp", cp["checkpoint_id"], "-o", str(out))
        imported = json.loads(cli(d, "import", "cli-other", str(out), "--json").stdout)
        assert imported["hash"] == cp["hash"]
        assert imported["trigger"] == "import"
        restored = cli(d, "restore", "cli-other", imported["checkpoint_id"]).stdout
        assert "1 -> 8 messages" in restored

        compacted = cli(d, "compact", "cli-cp", "--summary", "it read three files", "--keep", "2")
        assert compacted.stdout.startswith("compacted seqs 1..8")
        again = cli(d, "compact", "cli-cp", "--summary", "s", "--keep", "9", ok=False)
        assert again.returncode == 1
        assert "nothing_to_compact" in again.stderr

        fork = cli(d, "fork", "cli-cp", "--checkpoint", cp["checkpoint_id"], "--as", "cli-f")
        assert fork.stdout.strip() == "cli-f"
        page = json.loads(
            cli(d, "history", "cli-f", "--offset", "2", "--limit", "1", "--json").stdout
        )
        assert (page["offset"], page["next_offset"], page["total"]) == (1, 3, 8)
        tail = cli(d, "history", "cli-f", "--tail", "--limit", "2").stdout.splitlines()
        assert [line.split()[0] for line in tail] == ["5", "6", "7"]  # aligned to the call

        cli(d, "checkpoint", "cli-cp", "--delete", cp["checkpoint_id"])
        assert cp["checkpoint_id"] not in cli(d, "checkpoints", "cli-cp").stdout
        missing = cli(d, "restore", "cli-cp", cp["checkpoint_id"], ok=False)
        assert missing.returncode == 4
        assert "checkpoint" in missing.stderr
        assert s.Fold(pb.FoldRequest(run_id="cli-other")).state.last_seq == 2


@pytest.mark.slow
def test_export_and_import_stream_a_24_mib_checkpoint_and_a_failed_export_keeps_the_file(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d, jc.connect(str(d.socket)) as client:
        thirty_file_reads(client, "cli-big")
        cp = client.checkpoint("cli-big")
        with client.start("cli-dst", FP, "elsewhere") as run:
            run.assistant("ready", stop_reason="end_turn")
        out = tmp_path / "cp.json"
        out.write_bytes(b"an older export")
        out.chmod(0o644)
        cli(d, "export", "cli-big", cp.checkpoint_id, "-o", str(out))
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        assert out.stat().st_size > 16 * 1024 * 1024  # above one gRPC message
        to_stdout = subprocess.run(
            [*CLI, "--socket", str(d.socket), "export", "cli-big", cp.checkpoint_id],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
        assert to_stdout == out.read_bytes()

        # a checkpoint that does not exist: refused before any byte, the file is untouched
        missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        failed = cli(d, "export", "cli-big", missing, "-o", str(out), ok=False)
        assert failed.returncode == 4, failed.stderr
        assert out.read_bytes() == to_stdout
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []

        # import from a file and from stdin, each read and sent in chunks
        from_file = json.loads(cli(d, "import", "cli-dst", str(out), "--json").stdout)
        piped = subprocess.run(
            [*CLI, "--socket", str(d.socket), "import", "cli-dst", "-", "--json"],
            input=to_stdout,
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert json.loads(piped.stdout)["hash"] == from_file["hash"] == cp.hash
