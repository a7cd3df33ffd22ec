"""The scrubber and ``journald verify`` check the message pages a run's rebases reference
(docs/design.md#message-pages, docs/design.md#scrubbing).

A run restored from a checkpoint whose conversation is paged (three 300 KB tool results: the
rebase names three pages), then one of those pages deleted, or one of its bytes flipped, in
the run's ``attachments/``, served by a real daemon: the first background pass shows the run
``corrupted`` with a finding that names the page, and ``journald verify RUN`` exits 1 saying
``store_corrupted`` and the page; the healthy copy of the same run is flagged by neither.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.rpc import stub
from tests.integration.server.test_damaged_runs import cli
from tests.integration.server.test_scrub import FAST_SCRUB, NO_SCRUB, statuses
from tests.waiting import wait_until

RUN = "paged"
HEALTHY = "healthy"
READ_BYTES = 300 * 1024  # each tool turn is a page of its own


def write_restored(c: jc.Client, run_id: str) -> list[str]:
    """A run whose last record is a paged restore rebase; the pages it names."""
    with c.start(run_id, FP, "read the repository") as run:
        for i in range(3):
            call = {"type": "tool_use", "id": f"t{i}", "name": "read_file", "input": "{}"}
            run.assistant([call], stop_reason="tool_use")
            run.tool_result(f"t{i}", f"file {i} " + "r" * READ_BYTES)
        run.assistant("read 3 files", stop_reason="end_turn")
    cp = c.checkpoint(run_id)
    c.restore(run_id, cp.checkpoint_id)
    last = list(c.load(run_id))[-1]
    assert last.kind == "rebase"
    return [p["sha256"] for p in json.loads(last.canonical)["rebase"]["pages"]]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("pages")
    with Daemon(tmp, "file", *NO_SCRUB) as d, jc.connect(str(d.socket)) as c:
        pages = write_restored(c, RUN)
        write_restored(c, HEALTHY)
    assert len(pages) == 3
    return tmp / "data", pages


def deleted(page: Path) -> None:
    page.unlink()


def flipped(page: Path) -> None:
    raw = bytearray(page.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    page.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", [deleted, flipped], ids=["deleted", "flipped"])
def test_a_referenced_page_missing_or_damaged_is_found_by_a_scrub_pass_and_by_verify(
    pristine: tuple[Path, list[str]], tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    data = Path(shutil.copytree(pristine[0], tmp_path / "data"))
    (data / "daemon.lock").unlink(missing_ok=True)
    page = pristine[1][1]
    damage(data / "sessions" / RUN / "attachments" / page)
    with Daemon(tmp_path, "file", *FAST_SCRUB, data_dir=data) as d:
        s = stub(d.target)
        wait_until(lambda: statuses(s)[RUN][0] == "corrupted", what="a pass flags the run")
        error = statuses(s)[RUN][1]
        assert f"message page {page}" in error, error
        assert f"run {RUN}" in error, error
        assert statuses(s)[HEALTHY] == ("open", "")
        res = cli(d, "verify", RUN)
        assert res.returncode != 0
        assert "store_corrupted" in res.stdout + res.stderr, res.stdout + res.stderr
        assert page in res.stdout + res.stderr
        assert cli(d, "verify", HEALTHY).returncode == 0
