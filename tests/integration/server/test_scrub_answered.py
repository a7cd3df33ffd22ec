"""The scrubber and ``journald verify`` check the answered-id chunks a run's fold snapshot
references (docs/design.md#answered-ids, docs/design.md#scrubbing).

A run of 1,200 answered tool calls held once by a real daemon: its lease end saves a version 3
snapshot whose answered ids are a chain of chunks in the run's ``attachments/``. One chunk of
the chain deleted: the first background pass shows the run ``corrupted`` with a finding that
names the chunk, and ``journald verify RUN`` exits 1 saying ``store_corrupted`` and the chunk;
the healthy copy of the same run is flagged by neither. ``journald recover RUN`` then drops the
snapshot (a cache: the run is folded from its records), and the run verifies and opens again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import stub
from tests.integration.server.test_damaged_runs import cli
from tests.integration.server.test_scrub import FAST_SCRUB, NO_SCRUB, statuses
from tests.waiting import wait_until

RUN = "calls"
HEALTHY = "healthy"
CALLS = 1200  # provider-length ids: two 16 KiB chunks and a tail


def tool_id(i: int) -> str:
    return f"toolu_{i:024d}"


def write_calls(c: jc.Client, run_id: str) -> None:
    with c.start(run_id, FP, "call tools") as run:
        for i in range(CALLS):
            call = {"type": "tool_use", "id": tool_id(i), "name": "read", "input": "{}"}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(tool_id(i), f"r{i}")
        run.assistant("done", stop_reason="end_turn")


def chain(data: Path, run_id: str) -> list[str]:
    """The chunks the run's snapshot names, newest first (read from its files)."""
    run = data / "sessions" / run_id
    doc = json.loads((run / "checkpoints" / "fold-snapshot.json").read_bytes())["snapshot"]
    assert doc["v"] == 3, doc["v"]
    out = []
    ref = doc["answered"]["head"]
    while ref is not None:
        out.append(ref["sha256"])
        ref = json.loads((run / "attachments" / ref["sha256"]).read_bytes())["prev"]
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("answered")
    with Daemon(tmp, "file", *NO_SCRUB) as d, jc.connect(str(d.socket)) as c:
        write_calls(c, RUN)
        write_calls(c, HEALTHY)
    chunks = chain(tmp / "data", RUN)
    assert len(chunks) >= 2
    assert len(chain(tmp / "data", HEALTHY)) == len(chunks)
    return tmp / "data", chunks


def test_an_answered_chunk_missing_is_found_by_a_scrub_pass_and_by_verify(
    pristine: tuple[Path, list[str]], tmp_path: Path
) -> None:
    data = Path(shutil.copytree(pristine[0], tmp_path / "data"))
    (data / "daemon.lock").unlink(missing_ok=True)
    chunk = pristine[1][-1]  # the oldest: found by walking the chain from its head
    (data / "sessions" / RUN / "attachments" / chunk).unlink()
    with Daemon(tmp_path, "file", *FAST_SCRUB, data_dir=data) as d:
        s = stub(d.target)
        wait_until(lambda: statuses(s)[RUN][0] == "corrupted", what="a pass flags the run")
        error = statuses(s)[RUN][1]
        assert f"answered-id chunk {chunk}" in error, error
        assert f"run {RUN}" in error, error
        assert statuses(s)[HEALTHY] == ("open", "")
        res = cli(d, "verify", RUN)
        assert res.returncode != 0
        assert "store_corrupted" in res.stdout + res.stderr, res.stdout + res.stderr
        assert chunk in res.stdout + res.stderr
        assert cli(d, "verify", HEALTHY).returncode == 0
        # the snapshot is a cache: Recover drops it, and the run verifies and opens again
        assert cli(d, "recover", RUN).returncode == 0
        assert cli(d, "verify", RUN).returncode == 0
        with jc.connect(str(d.socket)) as c, c.resume(RUN, FP) as run:
            assert run.state.last_seq == 2 * CALLS + 2
