"""The ``journald view [RUN]`` command (Textual is imported only when it runs)."""

from __future__ import annotations

import argparse
import os
import sys

from journald.cli.dispatch import EXIT_OK, EXIT_USAGE, Command, Context


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", default=None, help="open this run's transcript first")
    p.add_argument(
        "--theme",
        choices=["dark", "light"],
        default=os.environ.get("JOURNALD_VIEW_THEME", "dark"),
        help="colours for a dark or a light terminal (default: $JOURNALD_VIEW_THEME, else dark)",
    )


def _run(ctx: Context, args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        ctx.note("view needs a terminal; use `journald ls` / `journald replay RUN` in scripts")
        return EXIT_USAGE
    from journald.view.app import run_viewer

    run_viewer(ctx.socket, args.run, theme=args.theme)
    return EXIT_OK


COMMANDS = (
    Command(
        "view",
        "full-screen live viewer: runs, transcripts, details (q quits)",
        _add,
        _run,
    ),
)
