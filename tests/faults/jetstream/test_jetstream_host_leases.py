"""One writer per run across hosts: two daemons (two data dirs, standing for two hosts) on one
nats-server, each a real process killed -9 by its pid (docs/design.md#leases-across-hosts).

* A run held through daemon A is refused ``locked`` at Open through daemon B, naming A's client,
  pid, host, since and A's writer name; compact, restore, checkpoint, fork of the head,
  delete and recover through B are refused the same way and change nothing.
* A killed -9 holding the run: B's Open is refused until A's key expires, then granted (the
  delay is printed); A restarted while B holds it is refused at Open, naming B.
* A Watch through B sees what is appended through A.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from pathlib import Path

import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


def two_hosts(tmp_path: Path, stream_url: str, stream: str, *extra: str) -> tuple[Daemon, Daemon]:
    hosts = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        flags = ("--nats-url", stream_url, "--stream", stream, "--writer-name", f"host-{name}")
        sock = Path(f"/tmp/jd-xh-{name}-{os.getpid()}-{stream}/s")
        hosts.append(Daemon(tmp_path / name, "jetstream", *flags, *extra, socket=sock))
    return hosts[0], hosts[1]


def records_of(client: jc.Client, run_id: str) -> list[tuple[int, str]]:
    return [(r.seq, r.hash) for r in client.load(run_id)]


def test_a_run_held_through_one_host_is_refused_at_open_and_for_changes_through_another(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    host_a, host_b = two_hosts(tmp_path, url, stream)
    with host_a, host_b, jc.connect(str(host_a.socket), name="agent-a") as client_a:
        run = client_a.start("held", FP, "hello")
        run.assistant("first answer", stop_reason="end_turn")
        mark = run.checkpoint("before B tries")
        with jc.connect(str(host_b.socket), name="agent-b") as client_b:
            before = records_of(client_b, "held")
            with pytest.raises(jc.Locked) as refused:
                client_b.resume("held", FP)
            err = refused.value
            assert err.holder_name == "agent-a"
            assert err.holder_pid == os.getpid()
            assert err.holder_host
            assert err.holder_since
            assert err.metadata["holder_writer"] == "host-a"
            assert "through daemon host-a" in str(err)
            attempts = {
                "checkpoint": lambda: client_b.checkpoint("held", "from B"),
                "compact": lambda: client_b.compact("held", "a summary", keep_last=1),
                "restore": lambda: client_b.restore("held", mark.checkpoint_id),
                "fork of the head": lambda: client_b.fork("held", new_run_id="copy"),
                "delete": lambda: client_b.delete("held"),
                "recover": lambda: client_b.recover("held"),
            }
            for what, attempt in attempts.items():
                with pytest.raises(jc.Locked) as refused:
                    attempt()
                assert refused.value.metadata.get("holder_writer") == "host-a", what
            assert records_of(client_b, "held") == before
            assert client_b.checkpoints("held") == [mark]
            assert not any(r.run_id == "copy" for r in client_b.list())
        run.user("still A's run")  # the holder was never disturbed
        run.close()
        with (
            jc.connect(str(host_b.socket)) as client_b,  # released: B may take it at once
            client_b.resume("held", FP) as moved,
        ):
            assert moved.fold().last_seq == len(before) + 1


def test_a_host_killed_holding_a_run_frees_it_for_another_only_after_its_lease_ttl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    ttl_s = 3  # the default
    host_a, host_b = two_hosts(tmp_path, url, stream)
    with host_a, host_b:
        client_a = jc.connect(str(host_a.socket), name="agent-a", reconnect_timeout=0)
        run = client_a.start("orphan", FP, "hello")
        run.assistant("an answer A acknowledged", stop_reason="end_turn")
        host_a.kill9()  # dies holding the run: no release ever reaches NATS
        killed = time.monotonic()
        client_a.close()
        with jc.connect(str(host_b.socket), name="agent-b") as client_b:
            with pytest.raises(jc.Locked) as refused:
                client_b.resume("orphan", FP)  # A's key is still alive: A could still write
            assert refused.value.metadata["holder_writer"] == "host-a"
            granted: list[jc.Run] = []

            def take() -> bool:
                try:
                    granted.append(client_b.resume("orphan", FP))
                except jc.Locked:
                    return False
                return True

            wait_until(take, what="host B to take the orphaned run", timeout_s=90)
            delay_s = time.monotonic() - killed
            with capsys.disabled():
                print(
                    f"\ntakeover after kill -9 of the holder: {delay_s:.2f}s (lease ttl {ttl_s}s)"
                )
            [moved] = granted
            assert moved.fold().last_seq == 2
            moved.user("continued on B")
            host_a.start()  # A comes back while B holds the run
            with jc.connect(str(host_a.socket), name="agent-a2") as again:
                with pytest.raises(jc.Locked) as refused:
                    again.resume("orphan", FP)
                assert refused.value.holder_name == "agent-b"
                assert refused.value.metadata["holder_writer"] == "host-b"
            moved.assistant("and done", stop_reason="end_turn")
            moved.close()
            assert [s for s, _ in records_of(client_b, "orphan")] == [1, 2, 3, 4]


def test_a_watch_through_one_host_sees_the_records_and_checkpoints_made_through_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    host_a, host_b = two_hosts(tmp_path, url, stream)
    with (
        host_a,
        host_b,
        jc.connect(str(host_a.socket)) as client_a,
        jc.connect(str(host_b.socket)) as client_b,
    ):
        run = client_a.start("tailed", FP, "hello")
        seen: dict[int, float] = {}
        events: list[str] = []
        call = client_b._stub.Watch(pb.WatchRequest(run_id="tailed", from_seq=1))

        def tail() -> None:
            try:
                for msg in call:
                    if msg.HasField("record"):
                        seen[msg.record.seq] = time.monotonic()
                    elif msg.HasField("checkpoint"):
                        events.append(msg.checkpoint.checkpoint.checkpoint_id)
            except Exception:  # cancelled at the end
                return

        reader = threading.Thread(target=tail, daemon=True)
        reader.start()
        wait_until(lambda: 1 in seen, what="the replayed meta record")
        sent: dict[int, float] = {}
        for i in range(20):
            sent[i * 2 + 2] = time.monotonic()
            run.user(f"question {i}")
            sent[i * 2 + 3] = time.monotonic()
            run.assistant(f"answer {i}", stop_reason="end_turn")
        mark = run.checkpoint("seen from B")
        wait_until(lambda: 41 in seen and events, what="A's appends and checkpoint through B")
        call.cancel()
        assert sorted(seen) == list(range(1, 42))
        assert events == [mark.checkpoint_id]
        delays = [seen[s] - sent[s] for s in sent]
        with capsys.disabled():
            print(
                f"\ncross-host tail delay over {len(delays)} records: median "
                f"{statistics.median(delays) * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms"
            )


class Schedule:
    """Two daemons, one run, one client per daemon: the steps of a schedule, checking after
    each that at most one lease on the run is live and that no seq is acknowledged twice."""

    def __init__(self, hosts: dict[str, Daemon]) -> None:
        self.hosts = hosts
        self.clients: dict[str, jc.Client] = {}
        self.holders: dict[str, jc.Run] = {}
        self.acked: dict[int, tuple[str, str]] = {}  # seq -> (hash, the host that acked it)
        self.log: list[str] = []

    def client(self, host: str) -> jc.Client:
        if host not in self.clients:
            sock = str(self.hosts[host].socket)
            self.clients[host] = jc.connect(sock, name=f"agent-{host}", reconnect_timeout=0)
        return self.clients[host]

    def open(self, host: str, wait_s: float = 0.0) -> bool:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                run = self.client(host).open("sched", FP, "go")
            except jc.Locked:
                if time.monotonic() >= deadline:
                    self.log.append(f"open {host}: locked")
                    return False
                time.sleep(0.05)
                continue
            live = [h for h, r in self.holders.items() if r.lease_ended is None]
            assert not live, f"{host} was granted the run while {live} hold it: {self.log}"
            self.holders[host] = run
            self.log.append(f"open {host}: granted")
            return True

    def append(self, host: str, text: str) -> None:
        run = self.holders.get(host)
        if run is None:
            return
        try:
            ack = run.user(text)
        except jc.JournaldError as exc:
            self.log.append(f"append {host}: {exc.code}")
            return
        assert ack.seq not in self.acked, f"seq {ack.seq} acknowledged twice: {self.log}"
        self.acked[ack.seq] = (ack.hash, host)
        self.log.append(f"append {host}: seq {ack.seq}")

    def release(self, host: str) -> None:
        run = self.holders.pop(host, None)
        if run is not None:
            run.close()
            self.log.append(f"release {host}")

    def kill(self, host: str) -> None:
        self.hosts[host].kill9()
        self.holders.pop(host, None)  # its leases died with it
        client = self.clients.pop(host, None)
        if client is not None:
            client.close()
        self.log.append(f"kill -9 {host}")

    def restart(self, host: str) -> None:
        self.hosts[host].start()
        self.log.append(f"restart {host}")

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def test_a_schedule_of_opens_appends_kills_and_restarts_never_has_two_holders(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    host_a, host_b = two_hosts(tmp_path, url, stream, "--lease-ttl", "2")
    takeover_s = 15.0  # the bound waited for, far above the lease TTL
    with host_a, host_b:
        s = Schedule({"a": host_a, "b": host_b})
        try:
            assert s.open("a")
            s.append("a", "1")
            assert not s.open("b")  # held through a
            s.append("a", "2")
            s.kill("a")
            s.open("b")  # refused or granted: only a live holder matters
            assert s.open("b", wait_s=takeover_s)
            s.append("b", "3")
            s.restart("a")
            assert not s.open("a")
            s.append("b", "4")
            s.release("b")
            assert s.open("a")
            s.append("a", "5")
            s.kill("b")
            s.restart("b")
            assert not s.open("b")
            s.append("a", "6")
            s.kill("a")
            assert s.open("b", wait_s=takeover_s)
            s.append("b", "7")
            s.restart("a")
            s.open("a")
            s.append("b", "8")
            stored = {r.seq: r.hash for r in s.client("b").load("sched")}
        finally:
            s.close()
    assert sorted(s.acked) == list(range(2, 10)), s.log
    for seq, (digest, host) in s.acked.items():
        assert stored[seq] == digest, f"seq {seq} acked by {host} is not what is stored: {s.log}"
