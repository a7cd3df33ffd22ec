"""Disk faults seen from a client of the real daemon (docs/design.md#disk-faults): each is a
typed error saying what to do, never ``internal``; nothing is acknowledged into files no one
can read; Delete stays inside the data directory; exports are private."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

ROOT = Path(__file__).resolve().parents[3]
EXPORT = [sys.executable, "-m", "journald.cli", "export"]


def test_a_data_dir_deleted_under_an_open_lease_acknowledges_nothing(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=1)
        run = client.start("doomed", FP, "hi")
        run.user("acknowledged while the data was there")
        client.start("bystander", FP, "hi").close()
        shutil.rmtree(daemon.data_dir)

        for i in range(3):
            with pytest.raises(jc.BackendUnavailable) as refused:
                run.user(f"append {i} after the data directory went")
            assert "data directory" in refused.value.message
        with pytest.raises(jc.BackendUnavailable, match="data directory"):
            client.list()
        with pytest.raises(jc.BackendUnavailable, match="data directory"):
            client.start("new-run", FP, "hi")
        with pytest.raises(jc.BackendUnavailable, match="data directory"):
            client.resume("bystander", FP)
        with pytest.raises(jc.BackendUnavailable, match="data directory"):
            client.delete("bystander")
        assert not daemon.data_dir.exists()  # nothing was made again in its place
        with contextlib.suppress(jc.JournaldError):
            run.close()
        client.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A mounted tmpfs of 1 MiB and 64 inodes (root only)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64,mode=0700", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"mounting a tmpfs needs root ({exc}); tests/storage covers each errno")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=20)


def remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True, timeout=20)


def use_up(what: str, filler: Path) -> None:
    """Use up the file system's inodes (``inodes``: empty files) or its bytes."""
    filler.mkdir()
    failed: OSError | None = None
    if what == "inodes":
        for i in range(1000):
            try:
                (filler / f"f{i}").touch()
            except OSError as exc:
                failed = exc
                break
    else:
        fd = os.open(filler / "bytes", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(1000):
                os.write(fd, b"\0" * 65536)
        except OSError as exc:
            failed = exc
        finally:
            os.close(fd)
    assert failed is not None, f"the {what} never ran out"
    assert failed.errno == errno.ENOSPC


def test_a_read_only_or_full_disk_is_a_typed_error_on_open_and_delete(
    tmp_path: Path, small_disk: Path
) -> None:
    with Daemon(tmp_path, "file", data_dir=small_disk / "data") as daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=1)
        client.start("kept", FP, "hi").close()

        # the runs' directory read-only (a bind mount of it: the daemon's lock file stays
        # open for writing elsewhere, which a remount of the whole file system refuses)
        sessions = daemon.data_dir / "sessions"
        subprocess.run(["mount", "--bind", str(sessions), str(sessions)], check=True, timeout=20)
        try:
            remount(sessions, "bind,ro")
            with pytest.raises(jc.BackendUnavailable, match="EROFS"):
                client.start("on-read-only", FP, "hi")
            with pytest.raises(jc.BackendUnavailable, match="EROFS"):
                client.delete("kept")
            assert [r.run_id for r in client.list()] == ["kept"]  # reads still work
        finally:
            subprocess.run(["umount", str(sessions)], check=True, timeout=20)

        for what in ("inodes", "bytes"):
            filler = small_disk / f"filler-{what}"
            use_up(what, filler)
            with pytest.raises(jc.StorageFull, match="ENOSPC"):
                client.start(f"no-{what}", FP, "hi")
            assert f"no-{what}" not in [r.run_id for r in client.list()]  # nothing of it stays
            shutil.rmtree(filler)
            client.start(f"no-{what}", FP, "hi").close()  # the same Open, once freed
        assert client.delete("kept")
        client.close()


def test_delete_of_a_run_dir_that_is_a_symlink_removes_the_link_and_leaves_the_target(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=1)
        client.start("elsewhere", FP, "hi").close()
        sessions = daemon.data_dir / "sessions"
        outside = tmp_path / "outside"
        shutil.move(sessions / "elsewhere", outside)  # another directory, not journald's
        (sessions / "linked").symlink_to(outside)
        before = {p.name: p.read_bytes() for p in outside.iterdir() if p.is_file()}

        assert client.delete("linked")
        assert not os.path.lexists(sessions / "linked")
        assert [p.name for p in sessions.iterdir()] == []  # no .deleted-* left behind
        assert {p.name: p.read_bytes() for p in outside.iterdir() if p.is_file()} == before
        assert client.list() == []
        client.close()


def test_export_writes_a_file_only_its_owner_can_read(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=1)
        run = client.start("exported", FP, "a private conversation")
        run.user("secret")
        run.close()
        cp = client.checkpoint("exported")
        client.close()
        fresh, existing = tmp_path / "fresh.json", tmp_path / "existing.json"
        existing.write_bytes(b"old")
        existing.chmod(0o644)
        socket = ["--socket", str(daemon.socket)]
        for out in (fresh, existing):
            subprocess.run(
                [*EXPORT, "exported", cp.checkpoint_id, "-o", str(out), *socket],
                check=True,
                capture_output=True,
                timeout=60,
                cwd=ROOT,
            )
            assert stat.S_IMODE(out.stat().st_mode) == 0o600
            assert b"secret" in out.read_bytes()
