"""Fair shares against a real daemon (docs/design.md#fair-shares): idle connections past the
cap, a Verify flood, a dying client's leases, a Watch that does not read, incomplete HTTP/2
requests and the per-peer budgets. Every assertion is structural: what is served while
something else is provably held, never how fast."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.h2probe import Probe, grpc_message
from tests.integration.clientbin.common import FP
from tests.waiting import NotYet, eventually, wait_until, wait_until_async

HOLD = "background_call=wait:{}"


def held_daemon(tmp_path: Path, *extra: str) -> tuple[Daemon, Path]:
    """A file daemon whose background calls (reads, lease closes) wait at the failpoint
    while ``gate`` is absent; the test creates the gate first, so setup runs freely."""
    gate = tmp_path / "gate"
    gate.touch()
    env = {"JOURNALD_FAILPOINTS": HOLD.format(gate)}
    return Daemon(tmp_path, "file", "--read-threads", "1", *extra, env=env), gate


def held_writes(tmp_path: Path, *extra: str) -> tuple[Daemon, Path]:
    """A file daemon whose journal writes wait at ``before_write`` while ``gate`` is absent
    (created here, so setup writes freely; ``hold`` closes it)."""
    gate = tmp_path / "write-gate"
    gate.touch()
    env = {"JOURNALD_FAILPOINTS": f"before_write=wait:{gate}"}
    return Daemon(tmp_path, "file", *extra, env=env), gate


def hold(gate: Path) -> Path:
    """Close the gate: the next background call waits; returns the file saying it does."""
    reached = Path(f"{gate}.reached")
    reached.unlink(missing_ok=True)
    gate.unlink()
    return reached


async def bystander_is_served(client: jc.AsyncClient, existing: str, new: str) -> None:
    """What an agent needs: a new run, an append, a resume of a dormant run, a listing."""
    run = await client.start(new, FP, "a bystander's prompt")
    await run.user("still served")
    again = await client.resume(existing, FP)
    assert again.last_seq >= 2
    assert {r.run_id for r in await client.list()} >= {existing, new}
    await run.close()
    await again.close()


async def test_opens_are_served_while_every_read_thread_is_held_by_a_verify_flood(
    tmp_path: Path,
) -> None:
    daemon, gate = held_daemon(tmp_path)
    with daemon:
        client = await jc.connect_async(str(daemon.socket), name="bystander", reconnect_timeout=0)
        try:
            run = await client.start("dormant", FP, "hello")
            await run.user("one more")
            await run.close()
            reached = hold(gate)
            flood = [asyncio.create_task(client.verify("dormant")) for _ in range(8)]
            await wait_until_async(reached.exists, what="a Verify to hold the one read thread")
            await bystander_is_served(client, "dormant", "fresh")
            assert not any(t.done() for t in flood), "the Verify flood was not held"
            gate.touch()
            reports = await asyncio.gather(*flood)
            assert all(r.records == 2 for r in reports)
        finally:
            gate.touch()
            await client.close()


DYING_CLIENT = """
import sys, time
import journald_client as jc
from tests.integration.clientbin.common import FP
client = jc.connect(sys.argv[1], name="dying")
runs = [client.start(f"dying-{i}", FP, "hello") for i in range(int(sys.argv[2]))]
for run in runs:
    run.user("a change, so each close saves the run's index")
print("HOLDING", flush=True)
time.sleep(600)
"""


def kill_after_its_leases(sock: Path, leases: int) -> subprocess.Popen[bytes]:
    """A client process that opens ``leases`` leases, killed -9 once it holds them."""
    dying = subprocess.Popen(
        [sys.executable, "-c", DYING_CLIENT, str(sock), str(leases)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[3],
    )
    assert dying.stdout is not None
    assert dying.stdout.readline().strip() == b"HOLDING"
    os.kill(dying.pid, signal.SIGKILL)
    dying.wait()
    return dying


async def test_a_dying_client_holding_many_leases_does_not_hold_up_a_bystanders_open(
    tmp_path: Path,
) -> None:
    daemon, gate = held_daemon(tmp_path)
    with daemon:
        client = await jc.connect_async(str(daemon.socket), name="bystander", reconnect_timeout=0)
        dying = None
        try:
            run = await client.start("dormant", FP, "hello")
            await run.user("one more")
            await run.close()
            await wait_until_async(
                lambda: (daemon.data_dir / "sessions" / "dormant" / "meta.json").exists(),
                what="the bystander's own lease close",
            )
            reached = hold(gate)
            dying = await asyncio.to_thread(kill_after_its_leases, daemon.socket, 200)
            await wait_until_async(reached.exists, what="the dead client's lease closes to start")
            await bystander_is_served(client, "dormant", "fresh")
            # the closes are still held: a reopen of a dead client's run waits for its close
            reopen = asyncio.create_task(client.resume("dying-0", FP))
            await asyncio.sleep(0)
            assert not reopen.done()
            gate.touch()
            again = await reopen
            assert again.last_seq == 2
            await again.close()
        finally:
            gate.touch()
            if dying is not None and dying.poll() is None:
                os.kill(dying.pid, signal.SIGKILL)
                dying.wait()
            await client.close()


def test_idle_connections_past_the_cap_do_not_stop_another_clients_open_and_list(
    tmp_path: Path,
) -> None:
    nofile = 128
    flags = ("--max-connections", "16", "--handshake-timeout-s", "1")
    with Daemon(tmp_path, "file", *flags, nofile=(nofile, nofile)) as daemon:
        client = jc.connect(str(daemon.socket), name="bystander", reconnect_timeout=0)
        idle: list[socket.socket] = []
        try:
            run = client.start("before", FP, "hello")
            for _ in range(nofile + 32):  # more than the daemon has descriptors
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                try:
                    s.connect(str(daemon.socket))
                except OSError:
                    s.close()
                    break
                idle.append(s)
            assert len(idle) > 16
            # the bystander's own connection goes on: descriptors are left for its runs
            run.user("during the flood")
            fresh = client.start("during", FP, "hello")
            assert {r.run_id for r in client.list()} >= {"before", "during"}
            fresh.close()
            # and a new client gets in once the idle ones are closed by the daemon
            ls = [sys.executable, "-m", "journald.cli", "--socket", str(daemon.socket), "ls"]

            def listed() -> str:
                out = subprocess.run(ls, capture_output=True, text=True, timeout=30)
                if out.returncode != 0:
                    raise NotYet(out.stderr)
                return out.stdout

            assert "during" in eventually(listed, what="`journald ls` from a new connection")
            run.close()
        finally:
            for s in idle:
                s.close()
            client.close()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(grpc_message(b"\x0a\x01", declared=100), id="body-shorter-than-prefix"),
        pytest.param(b"\x00\x00", id="half-a-prefix-then-end-of-stream"),
    ],
)
def test_an_incomplete_request_holds_its_stream_no_longer_than_the_connection_bound(
    tmp_path: Path, data: bytes
) -> None:
    flags = ("--max-connection-age-s", "1", "--connection-age-grace-s", "1")
    with Daemon(tmp_path, "memory", *flags) as daemon:
        probe = Probe(str(daemon.socket))
        try:
            probe.open_call("/journald.v1.JournalService/List", data)
            wait_until(probe.stream_ended, what="the daemon to end the incomplete call")
        finally:
            probe.close()


async def read_until_cut(tail: AsyncIterator[jc.JournalRecord]) -> tuple[int, jc.ResourceExhausted]:
    """Read a tail (whose first record was read) in order until the daemon cuts it."""
    seen = 1
    try:
        async for rec in tail:
            assert rec.seq == seen + 1
            seen = rec.seq
    except jc.ResourceExhausted as exc:
        return seen, exc
    raise AssertionError(f"the tail ended after seq {seen} without being cut")


async def test_a_watch_that_falls_behind_is_cut_with_resource_exhausted(tmp_path: Path) -> None:
    flags = ("--watch-buffer-bytes", str(256 * 1024))
    with Daemon(tmp_path, "memory", *flags) as daemon:
        client = await jc.connect_async(str(daemon.socket), name="watcher", reconnect_timeout=0)
        try:
            run = await client.start("watched", FP, "hello")
            tail = client.watch("watched")
            assert (await anext(tail)).seq == 1
            for i in range(160):  # 16 MiB: far past the buffer and any transport window
                await run.user(f"{i} " + "x" * 100_000)
            seen, cut = await read_until_cut(tail)
            assert cut.limit == "watch_buffer_bytes"
            assert cut.flag == "--watch-buffer-bytes"
            assert seen < 161
            assert f"from seq {seen + 1}" in str(cut)
            # resumed where it was cut, it misses nothing
            resumed = client.watch("watched", seen + 1)
            assert (await anext(resumed)).seq == seen + 1
            await resumed.aclose()  # type: ignore[attr-defined]
            await run.close()
        finally:
            await client.close()


async def test_a_lease_past_the_per_peer_limit_is_refused_naming_the_flag_and_holds_nothing(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file", "--max-leases-per-peer", "2") as daemon:
        client = await jc.connect_async(str(daemon.socket), name="greedy", reconnect_timeout=0)
        try:
            held = [await client.start(f"run-{i}", FP, "hello") for i in range(2)]
            with pytest.raises(jc.ResourceExhausted) as refused:
                await client.start("run-2", FP, "hello")
            assert refused.value.limit == "max_leases_per_peer"
            assert "--max-leases-per-peer" in str(refused.value)
            assert not (daemon.data_dir / "sessions" / "run-2").exists()
            await held.pop().close()
            held.append(await client.start("run-2", FP, "hello"))
            for run in held:
                await run.close()
        finally:
            await client.close()


def test_a_lease_goes_on_across_the_connection_age_bound(tmp_path: Path) -> None:
    flags = ("--max-connection-age-s", "1", "--connection-age-grace-s", "1")
    with Daemon(tmp_path, "file", *flags) as daemon:
        client = jc.connect(str(daemon.socket), name="long-lived", reconnect_timeout=20)
        try:
            run = client.start("aged", FP, "hello")
            run.user("before")
            # a connection opened after the client's is closed after the client's was
            later = Probe(str(daemon.socket))

            def later_closed() -> bool:
                later.pump()
                return later.closed

            wait_until(later_closed, what="the daemon to close connections past their age")
            later.close()
            ack = run.user("after the client's connection was closed")
            assert ack.seq == 3
            assert [r.seq for r in client.load("aged")] == [1, 2, 3]
        finally:
            client.close()


async def test_appends_past_the_in_flight_bytes_budget_are_refused_and_the_first_is_kept(
    tmp_path: Path,
) -> None:
    # the first append's write waits at a failpoint gate, so its bytes are in flight for as
    # long as the test needs (a stall of some time is a window a loaded machine can miss).
    # The append past the budget goes on another run's stream: a stream answers in order, so
    # on the first's own stream its refusal would wait behind the held write.
    daemon, gate = held_writes(tmp_path, "--max-inflight-bytes-per-peer", "100000")
    with daemon:
        client = await jc.connect_async(str(daemon.socket), name="greedy", reconnect_timeout=0)
        try:
            run = await client.start("bytes", FP, "hello")
            other = await client.start("more-bytes", FP, "hello")
            reached = hold(gate)
            writer = run.pipelined()
            first = await writer.append(jc.Entry.user("a" * 60_000))
            await wait_until_async(reached.exists, what="the first append's write to be held")
            past = other.pipelined()
            await past.append(jc.Entry.user("b" * 60_000))
            try:
                with pytest.raises(jc.ResourceExhausted) as refused:
                    await past.flush()
            finally:
                gate.touch()
            assert refused.value.limit == "max_inflight_bytes_per_peer"
            await writer.flush()
            assert first.seq == 2
            assert [r.seq for r in await collect(client.load("bytes"))] == [1, 2]
            assert [r.seq for r in await collect(client.load("more-bytes"))] == [1]
        finally:
            gate.touch()
            await client.close()


async def collect(records: AsyncIterator[jc.JournalRecord]) -> list[jc.JournalRecord]:
    return [r async for r in records]
