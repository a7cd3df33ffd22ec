"""Clock steps (docs/design.md#checkpoints): a daemon restarted with its clock an hour behind,
or back from an hour ahead, keeps the checkpoint it just made under ``--checkpoint-max`` and
evicts the oldest; ids stay unique and sort in creation order.

The clock is stepped with ``JOURNALD_TEST_CLOCK_OFFSET_S`` (``journald/clock.py``), which
shifts every timestamp and id the daemon makes, as a host clock set that far off would."""

from __future__ import annotations

from pathlib import Path

import journald_client as jc

from journald.clock import OFFSET_ENV
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

HOUR_S = 3600


def checkpoint_after_restart(tmp_path: Path, offset_s: int, label: str) -> list[str]:
    """Restart the daemon with its clock ``offset_s`` off, take one checkpoint labelled
    ``label``; the labels of the run's checkpoints, in listing order."""
    daemon = Daemon(
        tmp_path,
        "file",
        "--checkpoint-max",
        "3",
        data_dir=tmp_path / "data",
        env={OFFSET_ENV: str(offset_s)},
    )
    with daemon:
        client = jc.Client(str(daemon.socket), reconnect_timeout=2)
        if not any(r.run_id == "clocked" for r in client.list()):
            run = client.start("clocked", FP, "hi")
            run.user("a turn to checkpoint")
            run.close()
        made = client.checkpoint("clocked", label)
        listed = client.checkpoints("clocked")
        client.close()
    ids = [c.checkpoint_id for c in listed]
    assert made.checkpoint_id in ids, f"the checkpoint just made ({label}) was evicted"
    assert ids == sorted(ids), "listing order is not id order"
    assert len(set(ids)) == len(ids)
    return [c.label for c in listed]


def test_a_clock_step_of_an_hour_either_way_keeps_the_new_checkpoint_and_evicts_the_oldest(
    tmp_path: Path,
) -> None:
    for label in ("a", "b", "c"):
        checkpoint_after_restart(tmp_path, 0, label)
    assert checkpoint_after_restart(tmp_path, -HOUR_S, "behind") == ["b", "c", "behind"]
    assert checkpoint_after_restart(tmp_path, +HOUR_S, "ahead") == ["c", "behind", "ahead"]
    # back to the true clock, an hour behind the newest id on disk
    assert checkpoint_after_restart(tmp_path, 0, "true") == ["behind", "ahead", "true"]
