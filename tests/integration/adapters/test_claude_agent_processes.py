"""``JournaldSessionStore`` across real processes: the writer's lease keeps a second process
from mirroring a session another one is mirroring (the SDK's mirror path reports the refusal),
and a writer killed with ``kill -9`` in the middle of its appends loses nothing it was told
was stored; a new process resumes the session where it stopped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import journald_client as jc
from journald_client.claude_agent import JournaldSessionStore

from tests.daemon import Daemon
from tests.integration.adapters.store_worker import KEY, SUB, batch
from tests.integration.clientbin.procs import Procs
from tests.waiting import wait_until

WORKER = "tests.integration.adapters.store_worker"


def load(socket: Path, key: Any) -> list[Any]:
    async def read() -> Any:
        async with JournaldSessionStore(socket=str(socket)) as store:
            return await store.load(key)

    return asyncio.run(read()) or []


def exact(entries: list[Any]) -> list[str]:
    """Entries as JSON text in their own key order: equal only if every value and every key
    order came back as written."""
    return [json.dumps(e, ensure_ascii=False) for e in entries]


def unheld(client: jc.Client) -> bool:
    return all(r.status != "held" for r in client.list())


def test_a_second_process_is_refused_while_one_mirrors_the_session_and_the_sdk_reports_it(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)
    with Procs() as procs, jc.connect(sock) as client:
        holder = procs.module(WORKER, "--socket", sock, "--mode", "hold", out=tmp_path / "a")
        holder.wait_for_line("HELD", 60)
        args = ["--socket", sock, "--mode", "mirror", "--dir", str(tmp_path)]
        second = procs.module(WORKER, *args, out=tmp_path / "b")
        refused = second.wait_for_line("MIRROR-ERROR", 60)
        assert second.wait_for_line("STORED") == "STORED 3"  # the holder's batch, alone
        assert f"being mirrored by pid {holder.pid}" in refused, refused
        assert "store-hold" in refused  # the holder's name, as its client gave it
        assert exact(load(daemon.socket, KEY)) == exact(batch(0))

        holder.kill9()
        wait_until(lambda: unheld(client), what="the killed holder's lease to end", timeout_s=60)
        third = procs.module(WORKER, *args, out=tmp_path / "c")
        # batch 0 again: its two entries with uuids are already stored, the one without is not
        assert third.wait_for_line("STORED") == "STORED 4"
        assert not [line for line in third.lines() if line.startswith("MIRROR-ERROR")]


def test_a_writer_killed_mid_append_loses_nothing_acknowledged_and_a_new_process_resumes(
    tmp_path: Path, daemon: Daemon
) -> None:
    sock = str(daemon.socket)
    with Procs() as procs, jc.connect(sock) as client:
        writer = procs.module(WORKER, "--socket", sock, "--mode", "steady", out=tmp_path / "w")
        writer.wait_for_line("ACKED 12", 120)
        writer.kill9()
        acked = max(int(x.split()[1]) for x in writer.lines() if x.startswith("ACKED"))
        wait_until(lambda: unheld(client), what="the killed writer's lease to end", timeout_s=60)

        stored = load(daemon.socket, KEY)
        assert len(stored) % 3 == 0  # whole batches only: each append is one durable write
        batches = len(stored) // 3
        assert batches >= acked + 1  # every acknowledged batch (and maybe the one in flight)
        assert exact(stored) == exact([e for n in range(batches) for e in batch(n)])
        subs = exact(load(daemon.socket, SUB))
        assert subs[: 3 * (acked // 4 + 1)] == exact(
            [e for n in range(0, acked + 1, 4) for e in batch(n)]
        )

        args = ["--socket", sock, "--mode", "steady", "--start", str(batches), "--batches", "3"]
        resumed = procs.module(WORKER, *args, out=tmp_path / "r")
        resumed.wait_for_line("DONE", 60)
    after = load(daemon.socket, KEY)
    assert exact(after) == exact([e for n in range(batches + 3) for e in batch(n)])
