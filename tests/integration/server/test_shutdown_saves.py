"""What a lease end saves survives a daemon shutdown (docs/design.md#operations, issue 31).

A lease end saves, in order, the run's fold snapshot, its fold marks and its view index (the
default History view's page index, ``view-index.json``); on a long run the last step runs
long after the run is listed free. A lease the shutdown itself ends (its Open stream still
open at SIGTERM) is released only as its stream ends, after the daemon has ended every
lease: the shutdown waits for that save too, bounded by ``--shutdown-save-s``, and a save
still running at the bound is abandoned (logged by run id) without leaving anything a later
read trusts. The failpoint ``lease_end_before_view_index`` holds a lease end between the
snapshot and the view index, the widest window there is.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.long_reads import default_view_reads_whole, read_turns
from tests.waiting import wait_until

RUN = "long-reads"
READS = 4
EXIT_WAIT_S = 60.0
"""A bound on the daemon's exit, generous for a loaded machine (not a timing assertion)."""


def index_of(data: Path, part: str = "view-index.json") -> Path:
    return data / "sessions" / RUN / "checkpoints" / part


def lease_end(client: jc.Client) -> None:
    """An Open and a close that change nothing: a lease end over the run as it is."""
    with client.resume(RUN, FP):
        pass


def stop_while_held(daemon: Daemon) -> int:
    """Write the run and send SIGTERM while its lease is still held: the shutdown ends it."""
    assert daemon.proc is not None
    with jc.connect(str(daemon.socket)) as client, client.start(RUN, FP, "read it all") as run:
        read_turns(run, "read", READS)
        daemon.proc.send_signal(signal.SIGTERM)
        return daemon.proc.wait(EXIT_WAIT_S)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_a_lease_the_shutdown_ends_has_its_view_index_saved_before_the_daemon_exits(
    tmp_path: Path, data: Path
) -> None:
    held = {"JOURNALD_FAILPOINTS": "lease_end_before_view_index=sleep:2000"}
    daemon = Daemon(tmp_path, "file", data_dir=data, env=held).start()
    try:
        assert stop_while_held(daemon) == 0
    finally:
        daemon.stop()
    assert index_of(data, "fold-snapshot.json").exists()
    assert index_of(data).exists()  # before: lost with the daemon's exit
    saved = index_of(data).read_bytes()
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        default_view_reads_whole(client, RUN)
        lease_end(client)
    # the index was current: the next lease end found nothing to add (a read of the default
    # view needs no derivation of the view from every page)
    assert index_of(data).read_bytes() == saved
    assert json.loads(saved)["index"]["pages"] > 0  # it indexes pages: the view is paged


def test_a_lease_released_just_before_the_shutdown_has_its_view_index_saved(
    tmp_path: Path, data: Path
) -> None:
    # the save outlasts the client's Release wait (2 s): the client cancels its stream and
    # the run is listed free while the lease end still saves
    held = {"JOURNALD_FAILPOINTS": "lease_end_before_view_index=sleep:3000"}
    daemon = Daemon(tmp_path, "file", data_dir=data, env=held).start()
    assert daemon.proc is not None
    try:
        with jc.connect(str(daemon.socket)) as client:
            with client.start(RUN, FP, "read it all") as run:
                read_turns(run, "read", READS)
            daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(EXIT_WAIT_S) == 0
    finally:
        daemon.stop()
    assert index_of(data).exists()
    saved = index_of(data).read_bytes()
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        default_view_reads_whole(client, RUN)
        lease_end(client)
    assert index_of(data).read_bytes() == saved


def test_a_save_held_past_the_bound_is_abandoned_by_run_and_the_next_start_reads_the_run(
    tmp_path: Path, data: Path
) -> None:
    held = {"JOURNALD_FAILPOINTS": "lease_end_before_view_index=sleep:600000"}
    daemon = Daemon(tmp_path, "file", "--shutdown-save-s", "1", data_dir=data, env=held).start()
    try:
        # before: the daemon waited for the held save (600 s) and the wait below timed out
        assert stop_while_held(daemon) == 0
    finally:
        daemon.stop()
    assert "abandoned the lease-end saves of 1 run(s)" in daemon.log()
    assert f": {RUN} (" in daemon.log()
    checkpoints = index_of(data).parent
    assert not index_of(data).exists()  # never half-written: absent until a save renames it in
    assert not [p.name for p in checkpoints.iterdir() if ".tmp-" in p.name]
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        default_view_reads_whole(client, RUN)  # derived from the pages, read-only
        assert not index_of(data).exists()  # a read writes nothing
        lease_end(client)  # the next lease end saves what the shutdown abandoned
        assert index_of(data).exists()
        default_view_reads_whole(client, RUN)


def test_a_second_signal_exits_at_once_naming_the_run_whose_save_it_abandons(
    tmp_path: Path, data: Path
) -> None:
    hold = tmp_path / "hold"  # never created: the save stays held until the process ends
    held = {"JOURNALD_FAILPOINTS": f"lease_end_before_view_index=wait:{hold}"}
    daemon = Daemon(tmp_path, "file", data_dir=data, env=held).start()
    assert daemon.proc is not None
    try:
        with jc.connect(str(daemon.socket)) as client, client.start(RUN, FP, "read") as run:
            read_turns(run, "read", READS)
            daemon.proc.send_signal(signal.SIGTERM)
            wait_until(Path(f"{hold}.reached").exists, what="the lease end to be held")
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.proc.wait(EXIT_WAIT_S) == 130
    finally:
        daemon.stop()
    assert f"abandoned the lease-end saves of 1 run(s) at a second signal: {RUN}" in daemon.log()
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        default_view_reads_whole(client, RUN)
