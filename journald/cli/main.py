"""``journald serve``: its options and the start of the daemon, and the NATS flags it shares with
``journald migrate``. The program that puts every command in one parser is ``journald.program``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from journald.paths import default_data_dir, default_socket_path
from journald.server import DEFAULT_MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from journald.storage.jetstream.options import NatsOptions


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("ib")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return n


def _octal_mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an octal file mode (e.g. 0660)"
        ) from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is not a file mode between 0000 and 0777")
    return mode


def add_nats_arguments(p: argparse.ArgumentParser, *, stream: bool) -> None:
    """The NATS connection flags ``serve`` and ``migrate`` share (secrets come from the
    environment: ``$JOURNALD_NATS_PASSWORD``, ``$JOURNALD_NATS_TOKEN``)."""
    g = p.add_argument_group("NATS (JetStream backend)")
    if stream:
        g.add_argument(
            "--nats-url", default="nats://127.0.0.1:4222", help="server URL(s), comma-separated"
        )
        g.add_argument("--stream", default="JOURNALD", help="JetStream stream to bind (must exist)")
    g.add_argument(
        "--nats-creds", default=None, metavar="FILE", help="NATS .creds file (user JWT + nkey seed)"
    )
    g.add_argument(
        "--nats-user", default=None, help="NATS user (password from $JOURNALD_NATS_PASSWORD)"
    )
    g.add_argument(
        "--nats-tls-ca",
        default=None,
        metavar="FILE",
        help="CA bundle that verifies the NATS server",
    )
    g.add_argument(
        "--nats-tls-cert",
        default=None,
        metavar="FILE",
        help="client certificate for NATS mutual TLS",
    )
    g.add_argument(
        "--nats-tls-key", default=None, metavar="FILE", help="its private key (PEM, unencrypted)"
    )
    if stream:
        g.add_argument(
            "--writer-name",
            default=None,
            help="this daemon's name on every record it writes to the stream and on its NATS "
            "connection; a host whose writer went stale is told it in `locked` (default: "
            "journald <host> pid <pid>)",
        )
        g.add_argument(
            "--nats-monitor-url",
            action="append",
            default=[],
            metavar="URL",
            help="a nats-server monitoring endpoint (http://host:8222; repeat per server): "
            "read at start-up to warn when a server does not fsync every write",
        )


def nats_options(args: argparse.Namespace) -> NatsOptions:
    """The NATS options the flags and the environment give, checked."""
    from journald.storage.jetstream.options import NatsOptions

    opts = NatsOptions.from_env(
        creds_path=args.nats_creds,
        user=args.nats_user,
        tls_ca_path=args.nats_tls_ca,
        tls_cert_path=args.nats_tls_cert,
        tls_key_path=args.nats_tls_key,
        writer=getattr(args, "writer_name", None),
        monitor_urls=tuple(getattr(args, "nats_monitor_url", None) or ()),
    )
    opts.check()
    return opts


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from journald.server import DEFAULT_SHUTDOWN_SAVE_S, fairness
    from journald.server.scrub import DEFAULT_SCRUB_BYTES_PER_S, DEFAULT_SCRUB_INTERVAL_S
    from journald.server.startup import EXIT_CODES
    from journald.storage import registry
    from journald.storage.aio_sync import MODES
    from journald.storage.io_pool import DEFAULT_EXECUTOR_THREADS, DEFAULT_IO_THREADS

    p = sub.add_parser(
        "serve",
        help="run the daemon (file backend on the default data dir)",
        description="Run the journald daemon in the foreground.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--socket",
        type=Path,
        default=None,
        help="unix socket path (default: $JOURNALD_SOCKET, else "
        "$XDG_RUNTIME_DIR/journald/journald.sock, else a per-user temp dir)",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default: $XDG_STATE_HOME/journald or ~/.local/state/journald)",
    )
    p.add_argument(
        "--backend",
        choices=registry.names(),
        default="file",
        help="; ".join(f"{b.name}: {b.summary}" for b in registry.BACKENDS.values()),
    )
    add_nats_arguments(p, stream=True)
    p.add_argument(
        "--socket-mode", type=_octal_mode, default=0o600, help="socket file mode (octal, 0600)"
    )
    p.add_argument(
        "--socket-group",
        default=None,
        help="group to share the socket with (its directory becomes 0750 in that group); a "
        "shared socket learns each peer's uid, and a run belongs to the uid that created it",
    )
    p.add_argument(
        "--shared-runs",
        action="store_true",
        help="on a shared socket, let every peer read, write and delete every run (without "
        "it, a uid other than root and the daemon's touches only the runs it created)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=_size,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="largest gRPC message either way (default 16 MiB; larger requests are refused "
        "before they are read, larger responses fail with response_too_large)",
    )
    p.add_argument(
        "--max-record-bytes",
        type=_size,
        default=4 * 1024 * 1024,
        help="largest record an Append may carry, as stored (default 4 MiB; 1k/1m/1g suffixes; "
        "larger ones are refused as record_too_large: put big tool output in an attachment)",
    )
    p.add_argument(
        "--segment-max-bytes",
        type=_size,
        default=16 * 1024 * 1024,
        help="file backend: seal a run's active segment once it holds this many bytes "
        "(default 16 MiB); sealed segments are read-only and verified by their digest",
    )
    p.add_argument(
        "--segment-max-records",
        type=int,
        default=5000,
        help="file backend: seal a run's active segment once it holds this many records "
        "(default 5000), whichever of the two limits comes first",
    )
    p.add_argument("--no-segments", action="store_true", help="never seal segments")
    p.add_argument(
        "--io-threads",
        type=_positive,
        default=DEFAULT_IO_THREADS,
        help="threads that write and fdatasync the file backend's runs, shared by every open "
        f"run (default {DEFAULT_IO_THREADS})",
    )
    p.add_argument(
        "--aio-sync",
        choices=MODES,
        default=None,
        help="file backend: fdatasync a run's group writes through Linux AIO from the event "
        "loop instead of a writer thread: auto (the default) when a probe at start-up proves "
        "it works in the data directory, else the writer threads; on: refuse to start "
        "without it; off: always the writer threads (default: $JOURNALD_AIO_SYNC, else auto)",
    )
    p.add_argument(
        "--blocking-threads",
        type=_positive,
        default=DEFAULT_EXECUTOR_THREADS,
        help="threads for the daemon's other blocking calls: reads, lock files (default "
        f"{DEFAULT_EXECUTOR_THREADS})",
    )
    fairness.add_arguments(p)
    p.add_argument(
        "--scrub-bytes-per-s",
        type=_size,
        default=DEFAULT_SCRUB_BYTES_PER_S,
        help="read budget of the background scrubber, which verifies every run in turn "
        "(default 2 MiB: a 1 GB data directory in about 10 minutes; 0 disables it)",
    )
    p.add_argument(
        "--scrub-interval-s",
        type=float,
        default=DEFAULT_SCRUB_INTERVAL_S,
        help="seconds from the end of one scrub pass to the start of the next (default "
        f"{DEFAULT_SCRUB_INTERVAL_S:.0f}; the first starts a minute after the daemon, or "
        "sooner for a shorter interval; 0 disables it)",
    )
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="keep checkpoints in this directory (default: with each run, deleted with it)",
    )
    p.add_argument(
        "--checkpoint-max", type=int, default=0, help="checkpoints kept per run (0 = no limit)"
    )
    p.add_argument(
        "--lease-ttl",
        type=_positive,
        default=3,
        metavar="SECONDS",
        help="jetstream: a daemon that dies holding runs blocks them on other hosts for at most "
        "this many seconds after its last renewal (renewed every third of it; default 3)",
    )
    p.add_argument(
        "--shutdown-save-s",
        type=float,
        default=DEFAULT_SHUTDOWN_SAVE_S,
        metavar="SECONDS",
        help="how long a shutdown waits, from the signal on, for the lease ends' saves (fold "
        "snapshot, marks, view index) before abandoning them: each run's next lease end saves "
        f"it again (default {DEFAULT_SHUTDOWN_SAVE_S:.0f})",
    )
    p.add_argument(
        "--nats-leader-wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="jetstream: how long start-up waits for the stream and its buckets to have a "
        "leader (a cluster electing after a node loss) before exiting 5 (default 30)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from journald.server import fairness
    from journald.server.daemon import ServeConfig, run
    from journald.server.runs import Limits
    from journald.server.startup import EXIT_CONFIG
    from journald.storage import registry
    from journald.storage.jetstream.options import NatsOptions, NatsOptionsError

    os.umask(0o077)  # every file and directory the daemon creates is private to its user
    try:  # the NATS flags matter (and are checked) only for a backend on NATS
        nats = nats_options(args) if registry.backend(args.backend).nats else NatsOptions()
    except NatsOptionsError as exc:
        print(f"journald: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    cfg = ServeConfig(
        socket_path=Path(
            args.socket or getattr(args, "global_socket", None) or default_socket_path()
        ).absolute(),
        data_dir=(args.data_dir or default_data_dir()).absolute(),
        backend=args.backend,
        socket_mode=args.socket_mode,
        socket_group=args.socket_group,
        max_message_bytes=args.max_message_bytes,
        limits=Limits(max_record_bytes=args.max_record_bytes),
        nats_url=args.nats_url,
        stream=args.stream,
        nats=nats,
        segment_max_bytes=args.segment_max_bytes,
        segment_max_records=args.segment_max_records,
        segmentation=not args.no_segments,
        checkpoint_dir=args.checkpoint_dir.absolute() if args.checkpoint_dir else None,
        checkpoint_max=args.checkpoint_max,
        shared_runs=args.shared_runs,
        io_threads=args.io_threads,
        aio_sync=args.aio_sync,
        blocking_threads=args.blocking_threads,
        shares=fairness.from_args(args),
        lease_ttl_s=float(args.lease_ttl),
        leader_wait_s=max(args.nats_leader_wait, 0.0),
        scrub_bytes_per_s=args.scrub_bytes_per_s,
        scrub_interval_s=args.scrub_interval_s,
        shutdown_save_s=max(args.shutdown_save_s, 0.0),
    )
    return run(cfg)
