"""Hypothesis profiles, and the size of the state-machine runs under each.

* ``ci``: what ``make test`` (and CI) runs: 200 examples per property, the state machines at
  their CI sizes, failing cases printed with an ``@reproduce_failure`` blob.
* ``dev``: the edit loop (``make test-fast``): 25 examples per property, small machine runs.

The profile is ``$HYPOTHESIS_PROFILE`` if set, else ``ci`` when ``$CI`` is set to anything but
``false``/``0`` (CI services set ``CI=true``), else ``dev``. Pass ``--hypothesis-seed=N`` to
pytest to fix the seed of every property test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

SLOW_DATA = [HealthCheck.too_slow]


@dataclass(frozen=True)
class MachineRun:
    """How many sequences (examples) of at most how many steps a state machine runs."""

    examples: int
    steps: int


def active_profile() -> str:
    explicit = os.environ.get("HYPOTHESIS_PROFILE", "")
    if explicit:
        return explicit
    return "ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "dev"


settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=SLOW_DATA, print_blob=True
)
settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=SLOW_DATA, print_blob=True
)
PROFILE = active_profile()

MACHINE_RUNS: dict[str, dict[str, MachineRun]] = {
    "ci": {
        "memory": MachineRun(60, 40),
        "file": MachineRun(40, 40),
        "jetstream": MachineRun(15, 30),
        "daemon": MachineRun(5, 15),
        # the machine on the deliberately wrong file journal (tests/storage/contract/
        # test_store_machine.py): how long it may search for, and shrink, the lost record
        "ack_before_fsync": MachineRun(200, 30),
    },
    "dev": {
        "memory": MachineRun(15, 25),
        "file": MachineRun(10, 25),
        "jetstream": MachineRun(4, 20),
        "daemon": MachineRun(3, 10),
        # short sequences: the loss needs one failed write, and shrinking 30-step sequences of
        # a real file store took 10-160 s (seed-dependent); 5 steps found it in 3-16 s
        "ack_before_fsync": MachineRun(200, 5),
    },
}


def machine_run(name: str) -> MachineRun:
    return MACHINE_RUNS.get(PROFILE, MACHINE_RUNS["ci"])[name]


def machine_seed() -> int:
    """``$JOURNALD_MACHINE_SEED``, else pytest's ``--hypothesis-seed``, else a fresh one."""
    import random

    import hypothesis.core

    explicit = os.environ.get("JOURNALD_MACHINE_SEED", "")
    if explicit:
        return int(explicit)
    forced = hypothesis.core.global_force_seed
    if isinstance(forced, int):
        return forced
    return random.SystemRandom().getrandbits(32)


def run_machine(
    machine: type[RuleBasedStateMachine], size: MachineRun, test_id: str, **options: Any
) -> None:
    """Run a state machine with ``size`` (and any other Hypothesis ``options``) under a seed
    that a failure prints for its replay."""
    chosen = machine_seed()
    seeded = seed(chosen)(type(machine.__name__, (machine,), {}))
    try:
        run_state_machine_as_test(
            seeded,
            settings=settings(
                max_examples=size.examples,
                stateful_step_count=size.steps,
                deadline=None,
                suppress_health_check=SLOW_DATA,
                **options,
            ),
        )
    except BaseException as exc:
        exc.add_note(
            f"replay: JOURNALD_MACHINE_SEED={chosen} HYPOTHESIS_PROFILE={PROFILE} "
            f".venv/bin/pytest '{test_id}'"
        )
        raise


def scaled(ci_examples: int) -> int:
    """A property test's own example count under the active profile: as written for ``ci``,
    an eighth of it (at least 10) for ``dev``. Use as ``@settings(max_examples=scaled(300))``."""
    return ci_examples if PROFILE == "ci" else max(10, ci_examples // 8)
