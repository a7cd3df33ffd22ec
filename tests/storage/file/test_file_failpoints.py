"""Failpoints: grammar, arming, n-th hit, and zero work while unarmed."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from journald import failpoints
from journald.storage.file.store import FileStore
from tests.builders import JournalBuilder
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _disarm() -> object:
    yield None
    failpoints.disarm()


def test_unarmed_failpoints_are_a_single_false_boolean() -> None:
    failpoints.disarm()
    assert failpoints.ARMED is False
    failpoints.hit("before_write")  # nothing armed: a no-op even if called


def test_raise_fires_on_the_nth_hit_only_with_the_named_errno() -> None:
    failpoints.arm("before_write=raise:EIO@2")
    assert failpoints.ARMED is True
    failpoints.hit("before_write")
    with pytest.raises(OSError, match="failpoint before_write") as err:
        failpoints.hit("before_write")
    assert err.value.errno == errno.EIO
    failpoints.hit("before_write")
    failpoints.hit("mid_seal")


def test_raise_defaults_to_enospc_on_every_hit() -> None:
    failpoints.arm("mid_seal=raise")
    for _ in range(2):
        with pytest.raises(OSError, match="No space left") as err:
            failpoints.hit("mid_seal")
        assert err.value.errno == errno.ENOSPC


@pytest.mark.parametrize(
    "spec",
    [
        "nosuchpoint=kill",
        "before_write",
        "before_write=explode",
        "before_write=raise:ENOPE",
        "before_write=wait",
    ],
)
def test_a_malformed_spec_is_refused_with_the_valid_names(spec: str) -> None:
    with pytest.raises(ValueError, match="JOURNALD_FAILPOINTS"):
        failpoints.arm(spec)


def test_wait_holds_the_caller_until_the_release_file_exists(tmp_path: Path) -> None:
    release = tmp_path / "release"
    failpoints.arm(f"js_object_before_meta=wait:{release}")
    held = threading.Thread(target=failpoints.hit, args=("js_object_before_meta",))
    held.start()
    wait_until(lambda: Path(f"{release}.reached").exists(), what="the point to be reached")
    assert held.is_alive()  # still held: the release file does not exist yet
    release.touch()
    held.join(30)
    assert not held.is_alive()


def test_kill_from_the_environment_is_a_real_sigkill() -> None:
    env = dict(os.environ, JOURNALD_FAILPOINTS="mid_repair=kill", PYTHONPATH=str(ROOT))
    code = (
        "from journald import failpoints; print('armed', failpoints.ARMED, flush=True); "
        "failpoints.hit('mid_repair'); print('survived')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -9
    assert proc.stdout == "armed True\n"


def test_crash_raises_a_base_exception_that_error_handlers_let_through() -> None:
    assert not issubclass(failpoints.Crash, Exception)  # what the write paths catch
    failpoints.arm("after_write_before_fsync=crash@1")
    with pytest.raises(failpoints.Crash, match="after_write_before_fsync"):
        failpoints.hit("after_write_before_fsync")
    failpoints.hit("after_write_before_fsync")  # @1: only the first hit


def test_on_switches_a_wrong_variant_on_without_firing_anything() -> None:
    failpoints.arm("bug_ack_before_fsync=on")
    assert failpoints.is_on("bug_ack_before_fsync")
    failpoints.hit("bug_ack_before_fsync")  # an "on" point never fires
    failpoints.arm("before_write=raise")
    assert not failpoints.is_on("before_write")
    assert not failpoints.is_on("bug_ack_before_fsync")


async def test_a_write_stopped_by_a_simulated_crash_fails_its_appends_instead_of_hanging(
    tmp_path: Path,
) -> None:
    b = JournalBuilder("crashed")
    b.turn(["t1", "t2"])
    journal = await FileStore(tmp_path).create(b.records[0])
    failpoints.arm("after_write_before_fsync=crash@1")
    appends = [asyncio.ensure_future(journal.append([r])) for r in b.records[1:]]
    done, waiting = await asyncio.wait(appends, timeout=10)
    assert not waiting, "an append waits forever on a writer that died"
    assert all(isinstance(task.exception(), failpoints.Crash) for task in done)
    await journal.close()
