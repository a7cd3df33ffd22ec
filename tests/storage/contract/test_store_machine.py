"""The Store protocol under long random sequences of operations, on every backend.

The machine is ``tests/storage/store_machine.py`` (its model ``run_model.py``, its backends
``machine_backends.py``); its CI sizes per backend are in ``tests/profiles.py``
(``MACHINE_RUNS``). The last tests prove the machine can fail (at the ``ack_before_fsync``
size of the profile: short sequences under ``dev``): with
a deliberately wrong file journal switched on (``bug_ack_before_fsync``: acknowledge a write
without waiting for its fdatasync), it finds a lost acknowledged record, shrinks the sequence
that loses it to a handful of steps, and the seed it prints replays the same failure.
"""

from __future__ import annotations

import re

import pytest
from hypothesis.stateful import RULE_MARKER

from tests.profiles import machine_run, run_machine
from tests.storage.conftest import backend_params
from tests.storage.machine_backends import FileBackend
from tests.storage.store_machine import StoreMachine, machine_for


@pytest.mark.parametrize("backend", backend_params())
def test_every_sequence_of_store_operations_keeps_exactly_the_acknowledged_records(
    backend: str, request: pytest.FixtureRequest
) -> None:
    run_machine(machine_for(backend), machine_run(backend), request.node.nodeid)


class AckBeforeFsyncMachine(StoreMachine):
    backend = FileBackend
    armed = "bug_ack_before_fsync=on"


def failing_case(test_id: str) -> tuple[str, list[str]]:
    """Run the machine on the wrong variant: (its failure message, the shrunk steps)."""
    with pytest.raises(Exception) as failure:  # noqa: PT011 - any failure, inspected below
        run_machine(
            AckBeforeFsyncMachine,
            machine_run("ack_before_fsync"),
            test_id,
            report_multiple_bugs=False,  # the simplest failing case only
            # no example database: a run would replay what another run saved there (the other
            # test here, maybe at once on another xdist worker) and shrink from that, so one
            # seed gave two different cases on a loaded machine
            database=None,
        )
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    steps = [line for line in notes.splitlines() if is_rule_step(line)]
    return f"{failure.value}\n{notes}", steps


def is_rule_step(line: str) -> bool:
    """A line ``state.<rule>(...)`` of a printed failing case (not an invariant check)."""
    name = line.removeprefix("state.").split("(")[0]
    return line.startswith("state.") and hasattr(getattr(StoreMachine, name, None), RULE_MARKER)


def test_the_machine_finds_an_ack_before_fsync_and_shrinks_it_to_a_few_steps(
    request: pytest.FixtureRequest,
) -> None:
    report, steps = failing_case(request.node.nodeid)
    # the lost record shows as a shorter run, or as a chain broken where it was overwritten
    assert "acknowledged records" in report or "store_corrupted" in report, report
    assert 1 <= len(steps) <= 6, report
    assert "failed_write" in steps[-1], report
    assert "@reproduce_failure(" in report


def test_a_failure_replays_from_the_seed_it_prints(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, steps = failing_case(request.node.nodeid)
    seed = re.search(r"JOURNALD_MACHINE_SEED=(\d+)", report)
    assert seed is not None, report
    monkeypatch.setenv("JOURNALD_MACHINE_SEED", seed.group(1))
    assert failing_case(request.node.nodeid)[1] == steps
