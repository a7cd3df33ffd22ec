"""Attacks on the daemon's fair shares, each against a real daemon with a bystander client
measured against its own baseline in the same daemon (issue 30 items 3-6, issue 23 item 8).

    .venv/bin/python bench/attacks.py [--code DIR] [--scale 0.25] [--only NAME ...]

For each attack a fresh daemon (file backend, temp data dir, its own socket) is started from
``--code`` (a checkout of journald: the branch by default; e.g. an export of main to compare),
the bystander (the Python client of this checkout, in this process) measures its append and
Open latencies (p99 of 100 appends, 20 Opens of new runs), the attacker starts in its own
process, the bystander measures again while it runs, the attacker is stopped by its pid and
the bystander measures once more (recovery). The daemon's RSS is sampled from /proc all the
while. Everything is loopback (a unix socket) and bounded; every process is stopped by pid.

Attacks (sizes at ``--scale 1``; the issue's figures in brackets):

* ``idle_connections``: 1,100 connections that never speak, under a 1,024-descriptor daemon
  [4,352 under 4,096]; the bystander's channel was connected before; ``ls_ok`` says whether a
  new `journald ls` got through during the attack.
* ``verify_flood``: 8 clients looping Verify on a 20,000-record run [the same].
* ``dying_leases``: a client holding 3,000 leases is killed -9 [the same].
* ``unread_loads``: 6 Loads and a Watch of a 100 MB run that are never read [6 Loads of
  103 MiB].
* ``big_records``: one lease writes 1,000 records of 200 KB (200 MB) while a Watch of the
  run never reads [210 MiB].
* ``incomplete_requests``: 20 raw HTTP/2 calls with a body shorter than its length prefix and
  20 with half a prefix then end-of-stream; ``closed`` counts those the daemon ended within
  the run of the attack (needs ``--max-connection-age-s``, passed when the code has it).

The goal (issue 30): bystander p99s within 3x of baseline, RSS within idle + 256 MiB, the
daemon serving throughout and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import pct  # noqa: E402

MiB = 1024 * 1024


# --- the daemon -------------------------------------------------------------------------


class Daemon:
    def __init__(self, code: Path, work: Path, *flags: str, nofile: int | None = None) -> None:
        self.code, self.work, self.flags, self.nofile = code, work, flags, nofile
        self.socket = Path(tempfile.mkdtemp(prefix="jd-atk-", dir="/tmp")) / "j.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.rss_max = 0
        self._sampling = False

    def start(self) -> Daemon:
        cmd = [sys.executable, "-m", "journald.cli", "serve", "--socket", str(self.socket)]
        cmd += ["--data-dir", str(self.work / "data"), "--backend", "file", *self.flags]
        if self.nofile:
            lim = (self.nofile, self.nofile)
            cmd = [
                sys.executable,
                "-c",
                f"import os,resource,sys; resource.setrlimit(resource.RLIMIT_NOFILE, {lim}); "
                "os.execv(sys.executable, sys.argv[1:])",
                *cmd,
            ]
        log = open(self.work / "daemon.log", "ab")  # noqa: SIM115 - the child's for its life
        self.proc = subprocess.Popen(cmd, cwd=self.code, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.work / "daemon.log").read_text()[-2000:])
            time.sleep(0.05)
        self._sampling = True
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def rss(self) -> int:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        while self._sampling:
            with contextlib.suppress(OSError):
                self.rss_max = max(self.rss_max, self.rss())
            time.sleep(0.05)

    def stop(self) -> None:
        self._sampling = False
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.socket.unlink()
            self.socket.parent.rmdir()


def has_flag(code: Path, flag: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "journald.cli", "serve", "--help"],
        cwd=code,
        capture_output=True,
        text=True,
    )
    return flag in out.stdout


# --- the bystander ----------------------------------------------------------------------


async def measure(client: Any, tag: str, appends: int = 100, opens: int = 20) -> dict[str, float]:
    """p99 of ``appends`` small appends to one run and of ``opens`` Opens of new runs (ms);
    a call that fails counts as failed, not as a latency."""
    from tests.integration.clientbin.common import FP

    lat: list[float] = []
    opn: list[float] = []
    failed = 0
    try:
        run = await asyncio.wait_for(client.start(f"bys-{tag}", FP, "hi"), 60)
        for i in range(appends):
            t = time.perf_counter()
            await asyncio.wait_for(run.user(f"bystander {i}"), 60)
            lat.append(time.perf_counter() - t)
        await run.close()
    except Exception:
        failed += 1
    for i in range(opens):
        t = time.perf_counter()
        try:
            r = await asyncio.wait_for(client.start(f"bys-{tag}-{i}", FP, "hi"), 60)
        except Exception:
            failed += 1
            continue
        opn.append(time.perf_counter() - t)
        await r.close()
    return {
        "append_p99_ms": pct(lat, 99) * 1e3,
        "open_p99_ms": pct(opn, 99) * 1e3,
        "failed": failed,
    }


def ls_ok(sock: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "journald.cli", "--socket", str(sock), "ls"],
        capture_output=True,
        timeout=60,
    )
    return out.returncode == 0


# --- attackers (each in its own process: `attacks.py --attacker NAME SOCKET ARG`) --------


def attacker_idle_connections(sock: str, n: int) -> None:
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(sock)
        except OSError:
            s.close()
            continue
        conns.append(s)
    print("READY", len(conns), flush=True)
    time.sleep(3600)


def attacker_verify_flood(sock: str, n: int) -> None:
    import journald_client as jc

    async def loop() -> None:
        client = await jc.connect_async(sock, name="flood", reconnect_timeout=0)
        print("READY", flush=True)

        async def one() -> None:
            while True:
                with contextlib.suppress(jc.JournaldError):
                    await client.verify("big")

        await asyncio.gather(*(one() for _ in range(n)))

    asyncio.run(loop())


def attacker_dying_leases(sock: str, n: int) -> None:
    import journald_client as jc

    from tests.integration.clientbin.common import FP

    async def go() -> None:
        client = await jc.connect_async(sock, name="dying", reconnect_timeout=0)
        runs = []
        for i in range(n):
            runs.append(await client.start(f"dying-{i}", FP, "hi"))
            await runs[-1].user("one change")
        print("READY", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(go())


def attacker_unread_loads(sock: str, n: int) -> None:
    import grpc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pb_grpc

    ch = grpc.insecure_channel(f"unix://{sock}")
    stub = pb_grpc.JournalServiceStub(ch)
    calls: list[Any] = [stub.Load(pb.LoadRequest(run_id="big")) for _ in range(n)]
    calls.append(stub.Watch(pb.WatchRequest(run_id="big", from_seq=1)))
    for c in calls:  # each has started: from here on it is never read
        next(c)
    print("READY", flush=True)
    time.sleep(3600)


def attacker_big_records(sock: str, n: int) -> None:
    import grpc
    import journald_client as jc
    from journald_client.pb import journal_pb2 as pb
    from journald_client.pb import journal_pb2_grpc as pb_grpc

    from tests.integration.clientbin.common import FP

    with jc.connect(sock, name="big-records", reconnect_timeout=0) as client:
        run = client.start("fed", FP, "hello")
        ch = grpc.insecure_channel(f"unix://{sock}")
        watch: Any = pb_grpc.JournalServiceStub(ch).Watch(pb.WatchRequest(run_id="fed", from_seq=1))
        next(watch)  # a tail that reads no further
        for i in range(n):  # 200 KB records through one lease
            run.user(f"{i} " + "y" * 200_000)
        print("READY", flush=True)
        time.sleep(3600)


def attacker_incomplete_requests(sock: str, n: int) -> None:
    from tests.h2probe import Probe, grpc_message

    probes = []
    for i in range(n):
        p = Probe(sock)
        data = grpc_message(b"\x0a\x01", declared=100) if i % 2 else b"\x00\x00"
        p.open_call("/journald.v1.JournalService/List", data)
        probes.append(p)
    print("READY", flush=True)
    start = time.monotonic()
    ended: set[int] = set()
    while time.monotonic() - start < 3600:
        for i, p in enumerate(probes):
            if i not in ended and p.stream_ended():
                ended.add(i)
                print("ENDED", i, round(time.monotonic() - start, 2), flush=True)
        time.sleep(0.05)


ATTACKERS: dict[str, Callable[[str, int], None]] = {
    "idle_connections": attacker_idle_connections,
    "verify_flood": attacker_verify_flood,
    "dying_leases": attacker_dying_leases,
    "unread_loads": attacker_unread_loads,
    "big_records": attacker_big_records,
    "incomplete_requests": attacker_incomplete_requests,
}


@contextlib.contextmanager
def attacker(name: str, sock: Path, n: int, out: Path) -> Iterator[subprocess.Popen[str]]:
    f = open(out, "w")  # noqa: SIM115 - the child's stdout for its life
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--attacker", name, str(sock), str(n)],
        stdout=f,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 300
        while "READY" not in out.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"attacker {name} did not start:\n{out.read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        f.close()


# --- one attack -------------------------------------------------------------------------


async def prepare_big_run(sock: Path, records: int, record_bytes: int) -> None:
    import journald_client as jc

    from tests.integration.clientbin.common import FP

    client = await jc.connect_async(str(sock), name="setup", reconnect_timeout=0)
    run = await client.start("big", FP, "hello")
    body = "z" * record_bytes
    batch = max(1, min(100, (1 * MiB) // max(1, record_bytes)))
    done = 0
    while done < records:
        k = min(batch, records - done)
        await run.append_many([jc.Entry.user(f"{done + j} {body}") for j in range(k)])
        done += k
    await run.close()
    await client.close()


async def run_attack(name: str, code: Path, scale: float, work: Path) -> dict[str, Any]:
    import journald_client as jc

    n = {
        "idle_connections": int(1100 * max(scale, 1.0)),
        "verify_flood": 8,
        "dying_leases": max(50, int(3000 * scale)),
        "unread_loads": 6,
        "big_records": max(100, int(1000 * scale)),
        "incomplete_requests": 40,
    }[name]
    flags: list[str] = []
    nofile = 1024 if name == "idle_connections" else None
    if name == "incomplete_requests" and has_flag(code, "--max-connection-age-s"):
        flags += ["--max-connection-age-s", "5", "--connection-age-grace-s", "2"]
    daemon = Daemon(code, work, *flags, nofile=nofile).start()
    row: dict[str, Any] = {"attack": name, "size": n}
    try:
        if name == "verify_flood":
            await prepare_big_run(daemon.socket, max(1000, int(20_000 * scale)), 200)
        if name == "unread_loads":
            await prepare_big_run(daemon.socket, max(40, int(400 * scale)), 250_000)
        client = await jc.connect_async(str(daemon.socket), name="bystander", reconnect_timeout=5)
        await measure(client, "warm", 20, 5)
        base = await measure(client, "base")
        idle = daemon.rss()
        daemon.rss_max = idle
        out = work / f"{name}.attacker.out"
        with attacker(name, daemon.socket, n, out) as atk:
            if name == "dying_leases":
                os.kill(atk.pid, signal.SIGKILL)  # the leases close now, under the bystander
            under = await measure(client, "under")
            if name == "idle_connections":
                row["ls_ok"] = await asyncio.to_thread(ls_ok, daemon.socket)
            if name == "incomplete_requests":
                await asyncio.sleep(8)
                row["closed"] = out.read_text().count("ENDED")
        after = await measure(client, "after")
        row.update(
            append_base_ms=base["append_p99_ms"],
            append_ratio=under["append_p99_ms"] / base["append_p99_ms"],
            open_base_ms=base["open_p99_ms"],
            open_ratio=under["open_p99_ms"] / base["open_p99_ms"],
            failed_under=under["failed"],
            rss_idle_mib=idle / MiB,
            rss_peak_mib=daemon.rss_max / MiB,
            recovered=after["failed"] == 0
            and after["open_p99_ms"] < 3 * base["open_p99_ms"]
            and after["append_p99_ms"] < 3 * base["append_p99_ms"],
        )
        await client.close()
    finally:
        daemon.stop()
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| attack | size | append p99 base → ratio | Open p99 base → ratio | failed | "
        "RSS idle → peak (MiB) | recovered | notes |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        notes = []
        if "ls_ok" in r:
            notes.append(f"new `ls` {'ok' if r['ls_ok'] else 'failed'}")
        if "closed" in r:
            notes.append(f"{r['closed']}/{r['size']} probes closed")
        lines.append(
            f"| {r['attack']} | {r['size']} | {r['append_base_ms']:.1f} ms → "
            f"{r['append_ratio']:.1f}x | {r['open_base_ms']:.1f} ms → {r['open_ratio']:.1f}x | "
            f"{r['failed_under']} | {r['rss_idle_mib']:.0f} → {r['rss_peak_mib']:.0f} | "
            f"{'yes' if r['recovered'] else 'no'} | {', '.join(notes)} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attacker", nargs=3, metavar=("NAME", "SOCKET", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--code", type=Path, default=ROOT, help="journald checkout to run")
    ap.add_argument("--scale", type=float, default=1.0, help="size of the attacks (1 = issue)")
    ap.add_argument("--only", nargs="*", default=list(ATTACKERS), choices=list(ATTACKERS))
    ap.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = ap.parse_args()
    if args.attacker:
        name, sock, n = args.attacker
        ATTACKERS[name](sock, int(n))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="journald-attacks-") as tmp:
        for name in args.only:
            work = Path(tmp) / name
            work.mkdir()
            row = asyncio.run(run_attack(name, args.code.resolve(), args.scale, work))
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
