"""Failpoints: grammar, arming, n-th hit, and zero work while unarmed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from journald import failpoints

ROOT = Path(__file__).resolve().parents[2]


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
    ["nosuchpoint=kill", "before_write", "before_write=explode", "before_write=raise:ENOPE"],
)
def test_a_malformed_spec_is_refused_with_the_valid_names(spec: str) -> None:
    with pytest.raises(ValueError, match="JOURNALD_FAILPOINTS"):
        failpoints.arm(spec)


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
