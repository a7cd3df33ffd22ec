"""The daemon under long random sequences of RPCs, restarts and kill -9 (through its socket).

The machine is ``tests/integration/daemon_machine.py``; its CI size is in ``tests/profiles.py``.
"""

from __future__ import annotations

import pytest

from tests.integration.daemon_machine import DaemonMachine
from tests.profiles import machine_run, run_machine


def test_every_sequence_of_rpcs_restarts_and_kills_keeps_exactly_the_acknowledged_records(
    request: pytest.FixtureRequest,
) -> None:
    run_machine(DaemonMachine, machine_run("daemon"), request.node.nodeid)
