"""The storage backends by name: the one place ``serve``, ``migrate``, the CLI and the tests
learn which backends exist and how each one opens (docs/design.md#backends).

A backend opens, from one ``BackendOptions``, everything a run keeps (``OpenedBackend``):

* ``records``: the run's journal (``journald.storage.base.Store``);
* ``checkpoints``: its checkpoints, and the fold marks that index History's pages (the
  ``save_mark``/``load_mark`` pair of ``CheckpointStore``);
* ``attachments``: its content-addressed attachments.

Adding a backend is writing its store module and adding one ``Backend`` entry to
``BACKENDS``: its name becomes a ``serve --backend`` choice, a ``migrate`` location
(``NAME:REST``, parsed by the entry) and a storage contract-suite parameter (the suite asks
for a factory module ``tests/storage/backend_NAME.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from journald.core.errors import BackendUnavailable, InvalidArgumentError
from journald.storage.aio_sync import Mode
from journald.storage.base import DEFAULT_GAP_WAIT_S, HostLeases, Store
from journald.storage.checkpoint_base import AttachmentStore, CheckpointStore
from journald.storage.file.checkpoint_store import FileAttachmentStore, FileCheckpointStore
from journald.storage.io_pool import DEFAULT_IO_THREADS
from journald.storage.jetstream.options import NatsOptions
from journald.storage.memory import MemoryAttachmentStore, MemoryCheckpointStore
from journald.storage.pages import paged_checkpoints

log = logging.getLogger("journald.storage")


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """Everything any backend is opened with; each backend reads the fields it needs."""

    data_dir: Path | None = None
    """The daemon's data directory (the file backend's runs)."""
    checkpoint_dir: Path | None = None
    """Keep checkpoints and fold marks here instead of where the backend keeps them."""
    gap_wait_s: float = DEFAULT_GAP_WAIT_S
    segment_max_bytes: int = 16 * 1024 * 1024
    segment_max_records: int = 5000
    segmentation: bool = True
    nats_url: str = "nats://127.0.0.1:4222"
    stream: str = "JOURNALD"
    nats: NatsOptions | None = None
    check_fsync: bool = False
    """JetStream: read the servers' monitoring endpoints and warn when one does not fsync."""
    ack_timeout_s: float = 5.0
    retry_window_s: float = 15.0
    io_threads: int = DEFAULT_IO_THREADS
    """File: the writer threads every open run shares
    (docs/design.md#io-threads-and-file-descriptors)."""
    aio_sync: Mode | None = None
    """File: a group write's fdatasync through Linux AIO from the event loop (``auto``: when
    the probe at open proves it; None: ``JOURNALD_AIO_SYNC``, else ``auto``;
    docs/design.md#durable-writes-without-a-thread-hop)."""
    read_only: bool = False
    """Open to copy runs out (``migrate``'s source): JetStream binds an unsafe stream and
    refuses writes."""
    lease_ttl_s: float = 3.0
    """JetStream: how long after a daemon's last renewal its runs are free for other hosts
    (docs/design.md#leases-across-hosts)."""
    leader_wait_s: float = 30.0
    """JetStream: how long start-up waits for the stream and its buckets to have a leader."""


@dataclass(slots=True)
class OpenedBackend:
    """One backend's stores, as a daemon (or one side of a migration) uses them."""

    records: Store
    checkpoints: CheckpointStore
    attachments: AttachmentStore
    leases: HostLeases | None = None
    """Who holds each run across hosts, when runs are shared between daemons (JetStream):
    a daemon starts it (``start``) before it serves."""
    sweep: Callable[[], Awaitable[int]] | None = None
    """Reclaims what crashed writes left behind (JetStream: orphan object chunks); a daemon
    runs it once in the background at start-up."""
    _background: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        """What the backend runs while a daemon serves it (the cross-host lease renewals, the
        start-up sweep)."""
        start = getattr(self.leases, "start", None)
        if start is not None:
            await start()
        if self.sweep is not None:
            self._background.append(asyncio.get_running_loop().create_task(self._swept()))

    async def _swept(self) -> None:
        assert self.sweep is not None
        try:
            swept = await self.sweep()
        except Exception as exc:  # a sweep only reclaims space: the next start tries again
            log.warning("the start-up sweep of orphan chunks failed: %s", exc)
            return
        log.log(
            logging.WARNING if swept else logging.INFO,
            "start-up sweep: purged the chunks of %d write(s) that never got their meta",
            swept,
        )

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        close = getattr(self.leases, "close", None)
        if close is not None:
            await close()
        await self.records.close()


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    summary: str
    """What it keeps where, for ``--help``."""
    location: str
    """How ``migrate`` names a store of it (``NAME:REST``)."""
    open: Callable[[BackendOptions], Awaitable[OpenedBackend]]
    options_at: Callable[[str], BackendOptions]
    """The options that open the store a location's ``REST`` names (``InvalidArgumentError``
    saying the right form when it names none)."""
    owns_data_dir: bool = False
    """Its runs live in ``data_dir`` (``migrate`` locks it as a daemon does)."""
    durable: bool = True
    """What it keeps outlives the process."""
    nats: bool = False
    """It connects to NATS (``serve`` checks the NATS flags only for such a backend)."""
    local_checkpoints: bool = True
    """Its checkpoints may live in a local ``--checkpoint-dir`` (false when other hosts
    must see them: JetStream keeps them in the stream's bucket)."""


# --- memory ---------------------------------------------------------------------------------


async def _open_memory(opts: BackendOptions) -> OpenedBackend:
    from journald.storage.memory import MemoryStore

    records = MemoryStore(gap_wait_s=opts.gap_wait_s)
    return OpenedBackend(records, MemoryCheckpointStore(), MemoryAttachmentStore())


def _memory_at(rest: str) -> BackendOptions:
    return BackendOptions()


# --- file -----------------------------------------------------------------------------------


def _data_dir(opts: BackendOptions, backend: str) -> Path:
    if opts.data_dir is None:
        raise InvalidArgumentError(f"the {backend} backend needs a data directory; pass one")
    return opts.data_dir


async def _open_file(opts: BackendOptions) -> OpenedBackend:
    from journald.storage.file.store import FileStore

    data_dir = _data_dir(opts, "file")
    records = FileStore(
        data_dir,
        segment_max_bytes=opts.segment_max_bytes,
        segment_max_records=opts.segment_max_records,
        segmentation=opts.segmentation,
        gap_wait_s=opts.gap_wait_s,
        io_threads=opts.io_threads,
        aio=opts.aio_sync,
    )
    if not opts.read_only and records.aio_sync() is not None:  # probed now, not at a write
        log.info("file backend: a group write's fdatasync goes through Linux AIO from the loop")
    sessions = records.sessions_dir
    return OpenedBackend(
        records,
        FileCheckpointStore.colocated_with(sessions, records.disk),  # one seam per backend
        FileAttachmentStore.colocated_with(sessions, records.disk),
    )


def _file_at(rest: str) -> BackendOptions:
    if not rest:
        raise InvalidArgumentError("file: names no directory; use file:DIR")
    return BackendOptions(data_dir=Path(rest))


# --- jetstream ------------------------------------------------------------------------------


async def _open_jetstream(opts: BackendOptions) -> OpenedBackend:
    """Records in the stream; checkpoints, fold marks and attachments in the stream's two
    Object Store buckets (docs/design.md#run-buckets-checkpoints-marks-and-attachments), bound
    like the stream: refused when missing or unsafe, except for a read-only source (a
    ``migrate`` from a stream without buckets: its runs have no side data)."""
    from journald.storage.jetstream.checkpoint_store import bind_run_stores, sweep_orphan_chunks
    from journald.storage.jetstream.lease_bucket import bind_lease_bucket
    from journald.storage.jetstream.leases import JetStreamLeases
    from journald.storage.jetstream.store import JetStreamStore

    records = await JetStreamStore.connect(
        opts.nats_url,
        opts.stream,
        options=opts.nats,
        read_only=opts.read_only,
        check_fsync=opts.check_fsync,
        gap_wait_s=opts.gap_wait_s,
        ack_timeout_s=opts.ack_timeout_s,
        retry_window_s=opts.retry_window_s,
        leader_wait_s=opts.leader_wait_s,
    )
    try:
        cli = (opts.nats or NatsOptions()).cli(opts.nats_url)
        cps, blobs = await bind_run_stores(records, cli, required=not opts.read_only)
        leases = None
        if not opts.read_only:
            bucket = await bind_lease_bucket(
                records.connection,
                records.stream,
                cli.url,
                cli,
                replicas=records.replicas,
                ack_timeout_s=records.ack_timeout_s,
                leader_wait_s=records.leader_wait_s,
            )
            leases = JetStreamLeases(records, bucket, ttl_s=opts.lease_ttl_s)
    except BaseException:
        await records.close()
        raise
    return OpenedBackend(
        records,
        cps if cps is not None else MemoryCheckpointStore(),
        blobs if blobs is not None else MemoryAttachmentStore(),
        leases,
        sweep=lambda: sweep_orphan_chunks((cps, blobs)),
    )


def _jetstream_at(rest: str) -> BackendOptions:
    url, slash, stream = rest.rpartition("/")
    if not slash or not stream or not url or url.endswith(":/") or url.endswith("/"):
        raise InvalidArgumentError(
            f"jetstream:{rest} names no stream; use jetstream:URL/STREAM "
            "(e.g. jetstream:nats://127.0.0.1:4222/JOURNALD)"
        )
    return BackendOptions(nats_url=url, stream=stream)


# --- the registry ---------------------------------------------------------------------------

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "file",
            "runs, checkpoints and attachments in the data directory (the default)",
            "file:DIR",
            _open_file,
            _file_at,
            owns_data_dir=True,
        ),
        Backend(
            "jetstream",
            "records in a NATS JetStream stream, checkpoints and attachments in its buckets",
            "jetstream:URL/STREAM",
            _open_jetstream,
            _jetstream_at,
            nats=True,
            local_checkpoints=False,
        ),
        Backend(
            "memory",
            "everything in the daemon's memory, gone when it stops (tests, demos)",
            "memory:",
            _open_memory,
            _memory_at,
            durable=False,
        ),
    )
}


def names() -> list[str]:
    return list(BACKENDS)


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BackendUnavailable(
            f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}",
            metadata={"backend": name},
        ) from None


async def open_backend(name: str, opts: BackendOptions) -> OpenedBackend:
    """Open backend ``name``; ``opts.checkpoint_dir`` moves its checkpoints (and fold marks)
    to that directory, for a backend whose runs stay on this host (refused for one whose
    checkpoints other hosts must see)."""
    entry = backend(name)
    if opts.checkpoint_dir is not None and not entry.local_checkpoints:
        raise InvalidArgumentError(
            f"--checkpoint-dir {opts.checkpoint_dir} cannot be used with --backend {name}: "
            f"the {name} backend keeps checkpoints where every host sees them (the stream's "
            "checkpoint bucket), and a local directory would hide them from the others; "
            "drop --checkpoint-dir",
            metadata={"backend": name, "checkpoint_dir": str(opts.checkpoint_dir)},
        )
    opened = await entry.open(opts)
    if opts.checkpoint_dir is not None:
        opened.checkpoints = FileCheckpointStore.separate(str(opts.checkpoint_dir))
    # checkpoints hold page references; the pages live with the run's attachments
    opened.checkpoints = paged_checkpoints(opened.checkpoints, opened.attachments)
    return opened


def parse_location(text: str) -> tuple[str, BackendOptions]:
    """``NAME:REST`` (``file:DIR``, ``jetstream:URL/STREAM``, ``memory:``) → the backend name
    and the options that open it."""
    name, sep, rest = text.partition(":")
    forms = " or ".join(b.location for b in BACKENDS.values())
    if not sep or name not in BACKENDS:
        raise InvalidArgumentError(
            f"{text!r} is not a store location; use {forms} "
            "(e.g. jetstream:nats://127.0.0.1:4222/JOURNALD)"
        )
    return name, BACKENDS[name].options_at(rest)
