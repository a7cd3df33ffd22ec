"""``journald serve``: the process around the servicer.

Start-up (``journald.server.startup``): take an exclusive lock on the data directory
(``<data_dir>/daemon.lock``, holding the pid) so two daemons never share one; open the store;
bind the unix socket (directory 0700, socket 0600 unless told otherwise; a stale socket left by
a dead daemon is replaced, a live one is refused); serve JournalService plus the standard
health and reflection services on a uvloop event loop; start the background scrubber
(``journald.server.scrub``), which verifies every run at its I/O budget.

Shutdown: the first SIGTERM/SIGINT stops accepting calls, ends every lease stream with a
``shutdown`` event, lets in-flight appends reach the disk (calls get ``shutdown_grace_s``),
waits for the lease ends' saves (fold snapshot, fold marks, view index) of every lease
released, before or by the shutdown, for at most ``shutdown_save_s`` from the signal, closes
the store and exits 0; a save still running then is abandoned (logged by run id; it is a
cache, every part written atomically, and the run's next lease end saves it). A second
signal exits at once (logging the saves it abandons).

A start-up refusal is printed as one paragraph on stderr (what is wrong, then the fix), never
as a traceback, and exits with a code that says what kind of problem it is (``EXIT_CODES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import grp
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from journald_proto import journal_pb2 as pb

from journald import telemetry
from journald.core.errors import JournaldError
from journald.server import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_SHUTDOWN_SAVE_S,
    edge,
    malloc_trim,
)
from journald.server.fairness import FairShares, PeerBudget, server_options
from journald.server.peers import PeerGate
from journald.server.runs import Limits
from journald.server.scrub import DEFAULT_SCRUB_BYTES_PER_S, DEFAULT_SCRUB_INTERVAL_S, Scrubber
from journald.server.service import JournalService
from journald.server.startup import (
    DataDirLocked,
    StartupRefused,
    check_socket_place,
    lock_data_dir,
    prepare_socket,
    raise_fd_limit,
    refusal,
    shares_socket,
)
from journald.storage.aio_sync import Mode
from journald.storage.checkpoint_base import seed_ids
from journald.storage.io_pool import (
    DEFAULT_EXECUTOR_THREADS,
    DEFAULT_IO_THREADS,
    bound_default_executor,
)
from journald.storage.jetstream.options import NatsOptions, NatsOptionsError
from journald.storage.registry import BackendOptions, open_backend

__all__ = ["DataDirLocked", "ServeConfig", "lock_data_dir", "run", "serve", "tune_gc"]

log = logging.getLogger("journald.daemon")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["JournalService"].full_name


@dataclass
class ServeConfig:
    socket_path: Path
    data_dir: Path
    backend: str = "file"
    socket_mode: int = 0o600
    socket_group: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    limits: Limits = field(default_factory=Limits)
    nats_url: str = "nats://127.0.0.1:4222"
    stream: str = "JOURNALD"
    nats: NatsOptions = field(default_factory=NatsOptions)
    segment_max_bytes: int = 16 * 1024 * 1024
    segment_max_records: int = 5000
    segmentation: bool = True
    shutdown_grace_s: float = 10.0
    shutdown_save_s: float = DEFAULT_SHUTDOWN_SAVE_S
    checkpoint_dir: Path | None = None
    checkpoint_max: int = 0
    shared_runs: bool = False
    io_threads: int = DEFAULT_IO_THREADS
    aio_sync: Mode | None = None
    blocking_threads: int = DEFAULT_EXECUTOR_THREADS
    shares: FairShares = field(default_factory=FairShares)
    lease_ttl_s: float = 3.0
    leader_wait_s: float = 30.0
    scrub_bytes_per_s: int = DEFAULT_SCRUB_BYTES_PER_S
    scrub_interval_s: float = DEFAULT_SCRUB_INTERVAL_S


def backend_options(cfg: ServeConfig) -> BackendOptions:
    return BackendOptions(
        data_dir=cfg.data_dir,
        checkpoint_dir=cfg.checkpoint_dir,
        gap_wait_s=cfg.limits.gap_wait_s,
        segment_max_bytes=cfg.segment_max_bytes,
        segment_max_records=cfg.segment_max_records,
        segmentation=cfg.segmentation,
        nats_url=cfg.nats_url,
        stream=cfg.stream,
        nats=cfg.nats,
        check_fsync=True,
        io_threads=cfg.io_threads,
        aio_sync=cfg.aio_sync,
        lease_ttl_s=cfg.lease_ttl_s,
        leader_wait_s=cfg.leader_wait_s,
    )


async def serve(
    cfg: ServeConfig,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    exit_if_abandoned: bool = False,
) -> int:
    """Serve until SIGTERM/SIGINT (or until ``stop`` is set, for in-process use);
    ``exit_if_abandoned``: when the shutdown abandoned a save, end the process here (``run``:
    a thread still in that save's disk call would hold the interpreter's exit)."""
    abandoned: list[str] = []
    check_socket_place(cfg.socket_path, cfg.socket_group)
    lock = lock_data_dir(cfg.data_dir)
    # Reads, lock files and every other asyncio.to_thread queue on a fixed number of threads
    # (docs/design.md#io-threads-and-file-descriptors).
    shares = cfg.shares.resolved()
    bound_default_executor(asyncio.get_running_loop(), cfg.blocking_threads, shares.read_threads)
    try:
        prepare_socket(cfg.socket_path, cfg.socket_group)
        opened = await open_backend(cfg.backend, backend_options(cfg))
        try:
            await opened.start()
            # checkpoint ids keep sorting after every stored one, whatever the clock did since
            seed_ids(await opened.checkpoints.newest_id())
        except BaseException:
            await opened.close()
            raise
        limits = dataclasses.replace(cfg.limits, max_message_bytes=cfg.max_message_bytes)
        budget = PeerBudget(shares)
        service = JournalService(
            opened.records,
            limits,
            opened.checkpoints,
            cfg.checkpoint_max,
            opened.attachments,
            opened.leases,
            budget,
        )
        service.hub.buffer_bytes = shares.watch_buffer_bytes
        telemetry.observe_leases(lambda: len(service.leases))
        trimmer = malloc_trim.Trimmer()
        service.leases.after_close = trimmer.lease_closed
        shared = shares_socket(cfg.socket_mode, cfg.socket_group)
        service.runs.owners.enforcing = shared
        service.runs.owners.shared_runs = cfg.shared_runs
        servers: list[tuple[grpc.aio.Server, health_aio.HealthServicer]] = []

        async def serve_on(path: Path, peer: int | None) -> None:
            server, health = grpc_server(cfg, service, trimmer, peer)
            try:
                server.add_insecure_port(f"unix://{path}")
            except RuntimeError as exc:
                raise StartupRefused(
                    f"cannot listen on socket {path} ({exc}); check that its directory "
                    "is writable, or pass another --socket"
                ) from None
            await server.start()
            servers.append((server, health))
            for name in ("", SERVICE_NAME):
                await health.set(name, health_pb2.HealthCheckResponse.SERVING)

        gate: PeerGate | None = None
        if shared:
            # several uids may dial the socket: learn each one's uid (journald.server.peers)
            gate = PeerGate(cfg.socket_path, lambda uid, path: serve_on(path, uid))
            await gate.start()
        else:
            await serve_on(cfg.socket_path, None)
        os.chmod(cfg.socket_path, cfg.socket_mode)
        if cfg.socket_group:
            os.chown(cfg.socket_path, -1, grp.getgrnam(cfg.socket_group).gr_gid)
        bound = os.lstat(cfg.socket_path)
        log.info(
            "journald serving on %s (backend %s, data %s)",
            cfg.socket_path,
            cfg.backend,
            cfg.data_dir,
        )
        print(
            f"journald: serving on {cfg.socket_path} (backend {cfg.backend}, data "
            f"{cfg.data_dir}); stop with Ctrl-C",
            file=sys.stderr,
            flush=True,
        )

        stop = stop if stop is not None else asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals > 1:
                closing = service.leases.closing()
                if closing:
                    log.warning(ABANDONED, len(closing), "a second signal", ", ".join(closing))
                os._exit(130)  # second signal: now
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        if ready is not None:
            ready.set()
        trimming = loop.create_task(trimmer.run())
        scrubber = Scrubber(
            opened.records,
            service.runs.scrubs,
            cfg.scrub_bytes_per_s,
            cfg.scrub_interval_s,
            service.runs.pages,
            service.runs.checkpoints,
        )
        scrubbing = loop.create_task(scrubber.run())
        watching = loop.create_task(watch_socket(cfg.socket_path, bound))
        await stop.wait()
        began = loop.time()
        trimming.cancel()
        scrubbing.cancel()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scrubbing
        log.info("shutting down: ending leases, finishing in-flight appends and lease-end saves")
        if gate is not None:
            await gate.close()
        for _, health in servers:
            await health.enter_graceful_shutdown()
        await service.shutdown(wait_closes=False)
        await asyncio.gather(*(server.stop(cfg.shutdown_grace_s) for server, _ in servers))
        # every lease is released by now (an Open stream releases its own as it ends, after
        # ``service.shutdown``): their closes save what the next read needs, so the store
        # stays open for them, within the bound
        left = max(0.0, began + cfg.shutdown_save_s - loop.time())
        abandoned = await service.leases.closed(left)
        if abandoned:
            bound_s = f"the {cfg.shutdown_save_s:g} s bound (--shutdown-save-s)"
            log.warning(ABANDONED, len(abandoned), bound_s, ", ".join(abandoned))
            await service.leases.abandon()  # they leave the store before it closes
        await opened.close()
        if still_ours(cfg.socket_path, bound):
            cfg.socket_path.unlink()
        return 0
    finally:
        lock.close()
        if abandoned and exit_if_abandoned:
            telemetry.shutdown()
            logging.shutdown()
            os._exit(0)  # a clean shutdown: what was abandoned is a cache


ABANDONED = (
    "shutdown: abandoned the lease-end saves of %d run(s) at %s: %s (their fold snapshot, "
    "fold marks or view index is kept as it was; each run's next lease end saves it again)"
)


SWITCH_INTERVAL_S = 0.001


def grpc_server(
    cfg: ServeConfig, service: JournalService, trimmer: malloc_trim.Trimmer, peer: int | None
) -> tuple[grpc.aio.Server, health_aio.HealthServicer]:
    """JournalService, health and reflection on a new server; ``peer``: the uid of every
    peer it will have (a shared socket's per-uid server), None for a private socket."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.so_reuseport", 0),
            *server_options(service.budget.shares),
        ]
    )
    edge.add_service(
        server,
        service.parts(),
        cfg.max_message_bytes,
        trimmer.note,
        owners=service.runs.owners,
        peer_uid=peer,
        budget=service.budget,
    )
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    return server, health_servicer


def still_ours(path: Path, bound: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino)


SOCKET_CHECK_EVERY_S = 10.0


async def watch_socket(path: Path, bound: os.stat_result) -> None:
    """Log once when the socket this daemon listens on is moved or replaced: clients that
    dial the path no longer reach it (only the daemon's uid or root can do that)."""
    while True:
        await asyncio.sleep(SOCKET_CHECK_EVERY_S)
        if not still_ours(path, bound):
            break
    log.error(
        "the socket %s was moved or replaced: clients dialing it no longer reach this daemon "
        "(and may reach whatever is there now); restart the daemon",
        path,
    )


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between young-generation collections (CPython's default is 700)."""


def tune_gc() -> None:
    """Collect less often: every RPC allocates thousands of short-lived, acyclic objects and
    an Open folds a whole run into new ones, so at the default threshold the collector walked
    the young generation every few records (about a sixth of an Open's time). The modules
    imported so far live as long as the process: frozen, no collection walks them again."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run(cfg: ServeConfig) -> int:
    import uvloop

    logging.basicConfig(
        level=os.environ.get("JOURNALD_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    log.info(telemetry.configure_from_env())
    tune_gc()
    # a thread waiting for the interpreter lock (the event loop, behind a Verify's walk on a
    # read thread) gets it after this long at most (CPython's default is 5 ms)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    malloc_trim.pin_mmap_threshold()
    before, now = raise_fd_limit()
    log.info("open files limit (RLIMIT_NOFILE soft): %s, was %s", now, before)
    try:
        return uvloop.run(serve(cfg, exit_if_abandoned=True))
    except (StartupRefused, NatsOptionsError, JournaldError) as exc:
        code, text = refusal(exc)
        print(f"journald: {text}", file=sys.stderr, flush=True)
        return code
    finally:
        telemetry.shutdown()
