"""``journald recover RUN``: quarantine a run's damaged records, through the daemon.

The daemon holds the run for it (refused with ``locked`` while a writer holds it), moves each
damaged line to its quarantine directory and records the hole in the run as a rebase with
reason ``quarantine`` (docs/design.md#recovery). Errors map to the
exit codes of ``journald.cli.dispatch``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from journald_client import RecoverResult

from journald.cli.dispatch import EXIT_OK, Command, Context
from journald.cli.replay import one_line


def _add_recover(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("--json", action="store_true", help="print JSON")


def recover_lines(r: RecoverResult) -> list[str]:
    """What ``recover`` did, as the command prints it (pure)."""
    if not r.rebase_seq:
        tail = f"; {r.repaired}" if r.repaired else ""
        return [f"run {r.run_id}: nothing to recover (no damaged or missing records){tail}"]
    span = f"seq {r.hole_from}" if r.hole_from == r.hole_to else f"seqs {r.hole_from}..{r.hole_to}"
    out = []
    if r.quarantined:
        s = "s" if r.quarantined != 1 else ""
        out.append(f"run {r.run_id}: moved {r.quarantined} damaged record{s} to {r.directory}")
        for q in r.records:
            out.append(
                f"  seq {q.seq}: {q.file} line {q.line} ({q.bytes} bytes, sha256 "
                f"{q.sha256[:16]}) -> {q.evidence}: {one_line(q.reason)}"
            )
    else:
        out.append(f"run {r.run_id}: no damaged bytes to move; records are missing")
    if r.repaired:
        out.append(f"  also: {r.repaired}")
    out.append(
        f"the hole ({span}) is recorded in the run as rebase seq {r.rebase_seq}, with the "
        "conversation rebuilt from the records that survived; every Open warns about it"
    )
    out.append(
        f"the run continues at seq {r.last_seq + 1}; check it with `journald show {r.run_id}`"
    )
    return out


def _run_recover(ctx: Context, args: argparse.Namespace) -> int:
    r = ctx.client.recover(args.run)
    if args.json:
        ctx.json(asdict(r))
    else:
        ctx.text("\n".join(recover_lines(r)))
    return EXIT_OK


COMMANDS = (
    Command(
        "recover",
        "move a run's damaged records to quarantine and record the hole in the run",
        _add_recover,
        _run_recover,
    ),
)
