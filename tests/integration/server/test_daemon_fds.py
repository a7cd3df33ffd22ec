"""The daemon's open-files limit: raised to the hard limit at start, and an Open that finds no
descriptor left fails with a typed error naming the limit and holds nothing
(docs/design.md#io-threads-and-file-descriptors)."""

from __future__ import annotations

from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.waiting import wait_until_async


def soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open-files line in /proc/PID/limits")


def test_the_daemon_raises_its_open_files_soft_limit_to_the_hard_limit(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file", nofile=(256, 2048)) as daemon:
        assert soft_nofile(daemon.pid) == 2048


async def test_an_open_past_the_open_files_limit_fails_naming_it_and_holds_nothing(
    tmp_path: Path,
) -> None:
    limit = 128
    # past the lease budget the descriptors allow (resource_exhausted, tested apart): the
    # descriptors themselves run out here
    leases = ("--max-leases-per-peer", "1000")
    with Daemon(tmp_path, "file", *leases, nofile=(limit, limit)) as daemon:
        client = await jc.connect_async(str(daemon.socket), name="fds", reconnect_timeout=0)
        runs = []
        try:
            refused: jc.BackendUnavailable | None = None
            for i in range(limit):  # each lease holds two descriptors: the limit comes first
                try:
                    runs.append(await client.start(f"run-{i}", FP, "hello"))
                except jc.BackendUnavailable as exc:
                    refused = exc
                    break
            assert refused is not None, f"{limit} leases opened under a limit of {limit} fds"
            blocked = f"run-{len(runs)}"
            assert f"limit of {limit} open files" in str(refused)
            assert "RLIMIT_NOFILE" in str(refused)
            assert "End leases" in str(refused)
            assert refused.metadata["errno"] == "EMFILE"
            assert refused.metadata["limit"] == str(limit)
            assert not (daemon.data_dir / "sessions" / blocked).exists()

            # a refused open gives back what it took: another one leaves the same fds open
            held = daemon.open_fds()
            with pytest.raises(jc.BackendUnavailable):
                await client.start(blocked, FP, "hello")
            assert daemon.open_fds() == held
            with pytest.raises(jc.BackendUnavailable):
                await client.open(blocked, FP, "hello")
            assert daemon.open_fds() == held

            # ending leases frees descriptors: the refused run can be created now
            for run in runs[-2:]:
                await run.close()
            del runs[-2:]
            await wait_until_async(
                lambda: daemon.open_fds() <= held - 4, what="the ended leases' fds to close"
            )
            run = await client.start(blocked, FP, "hello")
            assert run.last_seq >= 1
            runs.append(run)
        finally:
            for run in runs:
                await run.close()
            await client.close()
