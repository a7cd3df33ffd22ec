"""kill -9 of the daemon while a lease end is between its fold snapshot and its view index
(``lease_end_before_view_index``: the snapshot and fold marks are durable, the view index of
the default History view is not saved), as a shutdown's abandoned save or a crash leaves it
(docs/design.md#view-pages, docs/design.md#operations).

After a clean restart: every acknowledged record is there byte for byte, ``Verify`` passes,
no view index (nor a temp file of one) is there to be trusted, the default view of the run
reads whole (derived from the pages, by a read that writes nothing), and the run's next lease
end saves the index.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.long_reads import default_view_reads_whole, read_turns

RUN = "indexed"
pytestmark = pytest.mark.slow


def test_a_kill_before_the_view_index_loses_no_record_and_leaves_no_index_to_trust(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    armed = Daemon(
        tmp_path,
        "file",
        data_dir=data,
        env={"JOURNALD_FAILPOINTS": "lease_end_before_view_index=kill"},
    ).start()
    assert armed.proc is not None
    try:
        with jc.connect(str(armed.socket)) as client:
            with client.start(RUN, FP, "read the repository") as run:
                read_turns(run, "read", 4)
                acked = [r.canonical for r in client.load(RUN)]
            armed.proc.wait(60)  # the lease end (the Release above) reached the failpoint
    except grpc.RpcError:
        pass
    finally:
        armed.kill9()
        armed.stop()
    assert armed.proc.returncode == -9
    checkpoints = data / "sessions" / RUN / "checkpoints"
    assert (checkpoints / "fold-snapshot.json").exists()
    assert not (checkpoints / "view-index.json").exists()
    assert not [p.name for p in checkpoints.iterdir() if ".tmp-" in p.name]
    with Daemon(tmp_path, "file", data_dir=data) as d, jc.connect(str(d.socket)) as client:
        assert [r.canonical for r in client.load(RUN)] == acked  # nothing acknowledged lost
        client.verify(RUN)
        default_view_reads_whole(client, RUN)
        assert not (checkpoints / "view-index.json").exists()  # a read writes nothing
        with client.resume(RUN, FP):
            pass
        assert (checkpoints / "view-index.json").exists()  # the next lease end saves it
        default_view_reads_whole(client, RUN)
