"""The ``journald`` program: one parser holding ``serve``, ``migrate`` and every command of
``journald.cli`` and ``journald.view``.

It sits above both packages so that the import between them runs one way: the viewer builds
on the CLI's renderings (``journald.cli.replay``, ``journald.cli.commands``), and the CLI
never imports the viewer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from journald.cli.main import add_serve, cmd_serve

DESCRIPTION = (
    "The journald command line: ``serve`` runs the daemon; every other command talks to it."
)


def command_modules() -> list[Any]:
    """Every module that contributes client commands (each has a ``COMMANDS`` tuple); the one
    place a new command module is added."""
    from journald.cli import checkpoint_commands, commands, recover, verify
    from journald.view import command as view

    return [commands, checkpoint_commands, recover, verify, view]


def build_parser() -> argparse.ArgumentParser:
    from journald.cli import dispatch as cli_dispatch

    parser = argparse.ArgumentParser(prog="journald", description=DESCRIPTION)
    cli_dispatch.add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve(sub)
    mig = sub.add_parser(
        "migrate",
        add_help=False,
        help="copy runs between file and JetStream stores (see migrate --help)",
    )
    mig.add_argument("rest", nargs=argparse.REMAINDER)
    cli_dispatch.add_commands(sub, [c for m in command_modules() for c in m.COMMANDS])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["migrate"]:  # its own parser (works on stores, not through the daemon)
        from journald.cli import migrate

        return migrate.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return cmd_serve(args)
    if getattr(args, "client_command", None) is not None:
        from journald.cli.dispatch import dispatch

        return dispatch(args)
    print(f"journald: unknown command {args.command}", file=sys.stderr)
    return 2
