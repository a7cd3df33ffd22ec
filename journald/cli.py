"""The journald command line: ``serve`` runs the daemon; every other command talks to it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from journald.paths import default_data_dir, default_socket_path


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("ib")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the daemon (file backend on the default data dir)")
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
    p.add_argument("--backend", choices=["file", "jetstream", "memory"], default="file")
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--stream", default="JOURNALD", help="JetStream stream to bind (must exist)")
    p.add_argument("--nats-creds", default=None, help="NATS .creds file (JWT + nkey)")
    p.add_argument(
        "--nats-user", default=None, help="NATS user (password from $JOURNALD_NATS_PASSWORD)"
    )
    p.add_argument("--nats-tls-ca", default=None, help="CA bundle to verify the NATS server")
    p.add_argument("--nats-tls-cert", default=None, help="client certificate for NATS mTLS")
    p.add_argument("--nats-tls-key", default=None, help="client key for NATS mTLS")
    p.add_argument("--socket-mode", default="0600", help="socket file mode (octal)")
    p.add_argument("--socket-group", default=None, help="group to share the socket with")
    p.add_argument(
        "--max-message-bytes",
        type=_size,
        default=256 * 1024 * 1024,
        help="largest gRPC message (the Open lease carries the folded state; "
        "clients accept 256 MiB)",
    )
    p.add_argument("--max-record-bytes", type=_size, default=4 * 1024 * 1024)
    p.add_argument("--segment-max-bytes", type=_size, default=16 * 1024 * 1024)
    p.add_argument("--segment-max-records", type=int, default=5000)
    p.add_argument("--no-segments", action="store_true", help="never seal segments")
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="keep checkpoints in this directory (default: with each run, deleted with it)",
    )
    p.add_argument(
        "--checkpoint-max", type=int, default=0, help="checkpoints kept per run (0 = no limit)"
    )


def nats_options(args: argparse.Namespace) -> dict[str, object]:
    """Credentials and TLS for the JetStream backend; secrets come from the environment."""
    import socket
    import ssl

    opts: dict[str, object] = {"writer": f"journald {socket.gethostname()} pid {os.getpid()}"}
    if args.nats_creds:
        opts["user_credentials"] = args.nats_creds
    if args.nats_user:
        opts["user"] = args.nats_user
        opts["password"] = os.environ.get("JOURNALD_NATS_PASSWORD", "")
    if os.environ.get("JOURNALD_NATS_TOKEN"):
        opts["token"] = os.environ["JOURNALD_NATS_TOKEN"]
    if args.nats_tls_ca or args.nats_tls_cert:
        ctx = ssl.create_default_context(cafile=args.nats_tls_ca)
        if args.nats_tls_cert:
            ctx.load_cert_chain(args.nats_tls_cert, args.nats_tls_key)
        opts["tls"] = ctx
    return opts


def cmd_serve(args: argparse.Namespace) -> int:
    from journald.server.daemon import ServeConfig, run
    from journald.server.service import Limits

    os.umask(0o077)  # every file and directory the daemon creates is private to its user
    cfg = ServeConfig(
        socket_path=Path(
            args.socket or getattr(args, "global_socket", None) or default_socket_path()
        ).absolute(),
        data_dir=(args.data_dir or default_data_dir()).absolute(),
        backend=args.backend,
        socket_mode=int(args.socket_mode, 8),
        socket_group=args.socket_group,
        max_message_bytes=args.max_message_bytes,
        limits=Limits(max_record_bytes=args.max_record_bytes),
        nats_url=args.nats_url,
        stream=args.stream,
        segment_max_bytes=args.segment_max_bytes,
        segment_max_records=args.segment_max_records,
        segmentation=not args.no_segments,
        checkpoint_dir=args.checkpoint_dir.absolute() if args.checkpoint_dir else None,
        checkpoint_max=args.checkpoint_max,
    )
    return run(cfg)


def build_parser() -> argparse.ArgumentParser:
    from journald import cli_checkpoints, cli_commands, cli_recover

    del cli_checkpoints, cli_recover  # imported for their command registrations
    parser = argparse.ArgumentParser(prog="journald", description=__doc__)
    cli_commands.add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve(sub)
    mig = sub.add_parser(
        "migrate",
        add_help=False,
        help="copy runs between file and JetStream stores (see migrate --help)",
    )
    mig.add_argument("rest", nargs=argparse.REMAINDER)
    cli_commands.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["migrate"]:  # its own parser (works on stores, not through the daemon)
        from journald import migrate

        return migrate.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return cmd_serve(args)
    if getattr(args, "client_command", None) is not None:
        from journald.cli_commands import dispatch

        return dispatch(args)
    print(f"journald: unknown command {args.command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
