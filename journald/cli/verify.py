"""``journald verify RUN`` and ``journald verify --all``: the full check of runs, through the
daemon (docs/design.md#recovery).

Each run gets the walk every backend's ``Verify`` makes (canonical bytes, record schemas, seq
order, the hash chain; on the file backend also the line checksums and every sealed segment
against its manifest entry and digest). ``--all`` verifies every listed run in turn, prints
one line per damaged run and a summary, and exits 1 when any run is damaged (0 when none is);
the other exit codes are those of ``journald.cli.dispatch``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from journald_client import NotFoundError, StoreCorrupted

from journald.cli.dispatch import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Command, Context
from journald.cli.replay import one_line


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run id (or --all)")
    p.add_argument(
        "--all",
        action="store_true",
        help="verify every run; exit 1 when any is damaged",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_verify(ctx: Context, args: argparse.Namespace) -> int:
    if args.all == bool(args.run):
        ctx.note("journald verify: name one run, or pass --all (not both)")
        return EXIT_USAGE
    if args.all:
        return _verify_all(ctx, args.json)
    v = ctx.client.verify(args.run)
    if args.json:
        ctx.json(asdict(v))
    else:
        ctx.text(
            f"ok: run {args.run}: {v.records} records in {v.segments} segment"
            f"{'s' if v.segments != 1 else ''}, hash chain intact, last seq {v.last_seq}, "
            f"last hash {v.last_hash}"
        )
    return EXIT_OK


def _verify_all(ctx: Context, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for info in ctx.client.list():
        row: dict[str, Any] = {"run_id": info.run_id}
        try:
            v = ctx.client.verify(info.run_id)
        except NotFoundError:
            continue  # deleted since it was listed
        except StoreCorrupted as err:
            row.update(ok=False, error=err.message)
        else:
            row.update(ok=True, records=v.records, segments=v.segments, last_seq=v.last_seq)
        rows.append(row)
    damaged = [r for r in rows if not r["ok"]]
    if as_json:
        ctx.json({"runs": rows, "verified": len(rows), "damaged": len(damaged)})
    else:
        lines = [f"damaged: run {r['run_id']}: {one_line(r['error'])}" for r in damaged]
        records = sum(r.get("records", 0) for r in rows)
        lines.append(
            f"{len(rows)} run{'s' if len(rows) != 1 else ''} verified ({records} records): "
            + (
                f"{len(damaged)} damaged; quarantine with `journald recover RUN` or restore "
                "from a backup"
                if damaged
                else "every hash chain intact"
            )
        )
        ctx.text("\n".join(lines))
    return EXIT_ERROR if damaged else EXIT_OK


COMMANDS = (
    Command(
        "verify",
        "check a run's (or every run's, --all) hash chain and record schemas",
        _add_verify,
        _run_verify,
    ),
)
