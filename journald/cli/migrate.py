"""``journald migrate``: the command line of the copy between stores
(``journald.storage.migrate``, which has the rules: byte for byte, verified on both sides,
never overwriting). It locks a data dir it copies (no daemon may write it meanwhile), opens
both locations, shows the copy's progress on stderr and maps refusals to exit codes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from journald.cli.main import add_nats_arguments, nats_options
from journald.core.errors import JournaldError
from journald.server.startup import EXIT_CONFIG, StartupRefused
from journald.storage.jetstream.options import NatsOptionsError
from journald.storage.migrate import SideStores, migrate, open_location
from journald.storage.registry import BACKENDS, parse_location


def new_progress(console: Console | None = None) -> Progress:
    """The rich progress display ``main`` uses (on stderr)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        transient=False,
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="journald migrate",
        description="Copy runs with their checkpoints and attachments between stores (file <-> "
        "JetStream), verified on both sides; "
        "never overwrites a run that exists at the destination.",
    )
    forms = " or ".join(b.location for b in BACKENDS.values())
    p.add_argument("--from", dest="src", required=True, help=forms)
    p.add_argument("--to", dest="dst", required=True, help=f"{forms} (memory: verifies only)")
    p.add_argument("--creds", dest="nats_creds", default=None, help=argparse.SUPPRESS)
    add_nats_arguments(p, stream=False)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("run_ids", nargs="*", help="runs to copy (default: every run)")
    return p


async def _main(args: argparse.Namespace, console: Console) -> int:
    from journald.server.startup import lock_data_dir

    options = nats_options(args)
    async with AsyncExitStack() as stack:
        for loc in (args.src, args.dst):
            name, opts = parse_location(loc)
            if BACKENDS[name].owns_data_dir and opts.data_dir is not None:
                # a daemon must not write the directory while we copy it
                busy = "stop it first: migrate copies a data dir only while no daemon writes it"
                stack.callback(lock_data_dir(opts.data_dir, busy).close)
        src = await open_location(args.src, options, source=True)
        stack.push_async_callback(src.close)
        for problem in getattr(src.records, "unsafe", []):
            console.print(
                f"journald migrate: note: the source stream is unsafe to write "
                f"({problem.what}); reading it only",
                markup=False,
                highlight=False,
            )
        dst = await open_location(args.dst, options)
        stack.push_async_callback(dst.close)
        sides = (SideStores.of(src), SideStores.of(dst))
        ids = list(args.run_ids) or None
        if args.quiet:
            done = await migrate(src.records, dst.records, ids, sides=sides)
        else:
            with new_progress(console) as progress:
                done = await migrate(src.records, dst.records, ids, progress, sides)
    total = sum(r.records for r in done)
    cps = sum(r.checkpoints for r in done)
    atts = sum(r.attachments for r in done)
    console.print(
        f"migrated {len(done)} run(s), {total} record(s), {cps} checkpoint(s), "
        f"{atts} attachment(s), verified on both sides"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    # soft_wrap: a refusal's fix lines (`nats object add ...`) are pasted into a shell, so
    # they must stay whole lines; rich would wrap them at 80 columns when stderr is a pipe
    console = Console(stderr=True, soft_wrap=True)
    try:
        return asyncio.run(_main(args, console))
    except (StartupRefused, NatsOptionsError) as exc:
        console.print(f"journald migrate: {exc}", markup=False, highlight=False)
        return exc.exit_code if isinstance(exc, StartupRefused) else EXIT_CONFIG
    except JournaldError as exc:
        console.print(f"journald migrate: {exc}", markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
