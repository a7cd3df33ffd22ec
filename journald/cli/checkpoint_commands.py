"""CLI commands for checkpoints (docs/design.md#checkpoints): ``checkpoint``, ``checkpoints``,
``restore``, ``compact``, ``fork``, ``export``, ``import``, ``history``.

They talk to the daemon through the public checkpoint methods of the CLI's
``journald_client.Client`` (errors map to the exit codes of ``journald.cli.dispatch``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from journald_client import CheckpointMeta

from journald.cli.dispatch import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, Command, Context
from journald.cli.replay import elide_end, one_line, result_text


def meta_json(m: CheckpointMeta) -> dict[str, Any]:
    return dataclasses.asdict(m)


# --- checkpoint / checkpoints -------------------------------------------------------------


def _add_checkpoint(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("--label", default="", help="a label for the checkpoint")
    p.add_argument("--delete", metavar="ID", help="delete checkpoint ID instead (idempotent)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_checkpoint(ctx: Context, args: argparse.Namespace) -> int:
    if args.delete:
        deleted = ctx.client.delete_checkpoint(args.run, args.delete)
        ctx.note(f"checkpoint {args.delete} {'deleted' if deleted else 'did not exist'}")
        return EXIT_OK
    m = ctx.client.checkpoint(args.run, label=args.label)
    if args.json:
        ctx.json(meta_json(m))
    else:
        ctx.text(f"{m.checkpoint_id}  seq {m.seq}, {m.message_count} messages")
    return EXIT_OK


def _add_checkpoints(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_checkpoints(ctx: Context, args: argparse.Namespace) -> int:
    cps = ctx.client.checkpoints(args.run)
    if args.json:
        ctx.json([meta_json(m) for m in cps])
        return EXIT_OK
    if not cps:
        ctx.note(f"run {args.run} has no checkpoints (take one with `journald checkpoint`)")
        return EXIT_OK
    for m in cps:
        trig = m.trigger
        label = f"  {one_line(m.label)}" if m.label else ""
        ctx.text(
            f"{m.checkpoint_id}  {trig:<14} seq {m.seq:<6} {m.message_count:>5} msgs  "
            f"{m.created[:19].replace('T', ' ')}{label}"
        )
    return EXIT_OK


# --- restore / compact / fork -------------------------------------------------------------


def _add_restore(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("checkpoint", help="checkpoint id")
    p.add_argument("--no-checkpoint", action="store_true", help="skip the pre_restore checkpoint")


def _run_restore(ctx: Context, args: argparse.Namespace) -> int:
    resp = ctx.client.restore(args.run, args.checkpoint, checkpoint=not args.no_checkpoint)
    for w in resp.warnings:
        ctx.note(f"warning: {w.code}: {w.message}")
    pre = f" (pre_restore checkpoint {resp.pre_restore_checkpoint_id})"
    ctx.text(
        f"restored {args.checkpoint}: {resp.from_messages} -> {resp.to_messages} messages at "
        f"seq {resp.ack.seq}{pre if resp.pre_restore_checkpoint_id else ''}"
    )
    return EXIT_OK


def _add_compact(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--summary", help="the summary text (becomes one user message)")
    src.add_argument(
        "--summary-file",
        type=Path,
        help="a JSON array of messages ({role, content}) or plain text ('-' = stdin)",
    )
    p.add_argument("--keep", type=int, default=0, help="trailing messages to keep (aligned)")
    p.add_argument("--label", default="", help="label of the pre_compaction checkpoint")
    p.add_argument(
        "--no-checkpoint", action="store_true", help="skip the pre_compaction checkpoint"
    )


def _summary(args: argparse.Namespace) -> str | list[dict[str, Any]]:
    if args.summary is not None:
        return str(args.summary)
    path: Path = args.summary_file
    text = sys.stdin.read() if str(path) == "-" else path.read_text("utf-8")
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, list):
        return [{"role": m["role"], "content": m["content"]} for m in value]
    return text


def _run_compact(ctx: Context, args: argparse.Namespace) -> int:
    resp = ctx.client.compact(
        args.run,
        _summary(args),
        keep_last=max(0, args.keep),
        checkpoint=not args.no_checkpoint,
        label=args.label,
    )
    cp = f", checkpoint {resp.checkpoint_id}" if resp.checkpoint_id else ""
    if resp.compacted and resp.removed_range is not None and resp.ack is not None:
        lo, hi = resp.removed_range
        ctx.text(f"compacted seqs {lo}..{hi} at seq {resp.ack.seq}{cp}")
        return EXIT_OK
    ctx.note(f"compaction {resp.status}: {resp.reason}{cp}")
    return EXIT_ERROR


def _add_fork(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="source run id")
    p.add_argument("--checkpoint", default="", help="fork this checkpoint (default: the head)")
    p.add_argument("--as", dest="new_run", default="", help="the new run id (default: generated)")
    p.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="label the new run"
    )


def _run_fork(ctx: Context, args: argparse.Namespace) -> int:
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    new_run, state = ctx.client.fork(
        args.run, checkpoint_id=args.checkpoint, new_run_id=args.new_run, labels=labels
    )
    ctx.text(new_run)
    ctx.note(f"forked {args.run} into {new_run} ({len(state.messages)} messages)")
    return EXIT_OK


# --- export / import ----------------------------------------------------------------------


def _add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("checkpoint", help="checkpoint id")
    p.add_argument(
        "-o", "--output", type=Path, help="write to this file, mode 0600 (default: stdout)"
    )


def _run_export(ctx: Context, args: argparse.Namespace) -> int:
    # streamed chunk by chunk (an export may be far above one message): never held whole
    if args.output is None:
        size = ctx.client.export_checkpoint_to(args.run, args.checkpoint, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return EXIT_OK
    try:
        with private_file(args.output) as out:
            size = ctx.client.export_checkpoint_to(args.run, args.checkpoint, out)
    except OSError as exc:
        ctx.note(f"cannot write {args.output} ({exc.strerror}); nothing was exported there")
        return EXIT_ERROR
    ctx.note(f"wrote {size} bytes to {args.output}")
    return EXIT_OK


@contextlib.contextmanager
def private_file(path: Path) -> Iterator[BinaryIO]:
    """A file that becomes ``path`` readable by its owner alone (0600, as the daemon's own
    data files: an export holds a whole conversation) once the ``with`` block ends well.
    The bytes go to a 0600 file beside it first, renamed over ``path`` at the end, so a
    failure midway (the daemon, the disk) leaves ``path`` as it was, and old bytes are never
    readable by others. Not a regular file (``/dev/stdout``, a pipe): written directly."""
    if path.exists() and not path.is_file():
        with path.open("wb") as direct:
            yield direct
        return
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out:
            fd = -1  # owned by ``out`` now
            yield out
        os.replace(part, path)
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="the target run (must exist)")
    p.add_argument("file", help="an exported checkpoint ('-' = stdin)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_import(ctx: Context, args: argparse.Namespace) -> int:
    # read and sent chunk by chunk (ImportCheckpointChunks): the CLI never holds it whole
    if args.file == "-":
        meta = ctx.client.import_checkpoint_from(args.run, sys.stdin.buffer)
    else:
        try:
            source = Path(args.file).open("rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            ctx.note(f"no such file: {args.file}")
            return EXIT_NOT_FOUND
        with source:
            meta = ctx.client.import_checkpoint_from(args.run, source)
    if args.json:
        ctx.json(meta_json(meta))
    else:
        ctx.text(meta.checkpoint_id)
    return EXIT_OK


# --- history ------------------------------------------------------------------------------


def _add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("--offset", type=int, default=0, help="first message index (aligned back)")
    p.add_argument("--limit", type=int, default=50, help="at least this many (0 = total only)")
    p.add_argument("--tail", action="store_true", help="the last page (offset = total - limit)")
    p.add_argument("--json", action="store_true", help="print JSON")


def summarize(m: dict[str, Any], width: int) -> str:
    parts = []
    for b in m["content"]:
        t = b.get("type")
        if t == "text":
            parts.append(one_line(str(b.get("text", ""))))
        elif t == "tool_use":
            parts.append(f"-> {one_line(str(b.get('name', '?')))}")
        elif t == "tool_result":
            mark = "!" if b.get("is_error") else "<-"
            parts.append(f"{mark} {one_line(result_text(b))}")
        else:
            parts.append(f"[{t}]")
    return elide_end(" | ".join(parts), width)


def _run_history(ctx: Context, args: argparse.Namespace) -> int:
    offset = max(0, args.offset)
    if args.tail:
        total = ctx.client.history(args.run, limit=0).total
        offset = max(0, total - max(0, args.limit))
    resp = ctx.client.history(args.run, offset=offset, limit=max(0, args.limit))
    if args.json:
        ctx.json(
            {
                "total": resp.total,
                "offset": resp.offset,
                "next_offset": resp.next_offset,
                "messages": resp.messages,
            }
        )
        return EXIT_OK
    for i, m in enumerate(resp.messages, resp.offset):
        prefix = f"{i:>6} {m['role']:<9} "
        ctx.text(prefix + summarize(m, max(20, ctx.width - len(prefix))))
    if args.limit <= 0:
        ctx.note(f"{resp.total} messages (--limit 0 prints only the count)")
    elif not resp.messages:
        ctx.note(f"no messages from offset {offset}: the run has {resp.total}")
    else:
        ctx.note(
            f"messages {resp.offset}..{resp.next_offset - 1} of {resp.total}; next offset "
            f"{resp.next_offset}"
        )
    return EXIT_OK


COMMANDS = (
    Command(
        "checkpoint", "take (or --delete) a checkpoint of a run", _add_checkpoint, _run_checkpoint
    ),
    Command(
        "checkpoints", "list a run's checkpoints, oldest first", _add_checkpoints, _run_checkpoints
    ),
    Command(
        "restore",
        "restore a checkpoint into its run (appends a rebase)",
        _add_restore,
        _run_restore,
    ),
    Command("compact", "replace a run's early history by a summary", _add_compact, _run_compact),
    Command("fork", "start a new run from a checkpoint or the head", _add_fork, _run_fork),
    Command("export", "export a checkpoint as self-contained bytes", _add_export, _run_export),
    Command("import", "import exported checkpoint bytes into a run", _add_import, _run_import),
    Command("history", "page through a run's conversation", _add_history, _run_history),
)
