"""Copy runs between stores (file <-> JetStream), byte for byte, verified on both sides.

``journald migrate --from file:DIR --to jetstream:URL/STREAM [RUN_ID ...]`` (and the reverse,
or stream to stream; the NATS flags are ``journald serve``'s: ``--nats-creds``, ``--nats-user``,
``--nats-tls-*``, secrets from the environment). A location is ``NAME:REST`` of any backend
of ``journald.storage.registry``; ``--to memory:`` copies into memory, so it verifies every
run on both sides and writes nothing.

A JetStream source is opened read-only: its configuration is not checked for writing (each
problem is printed as a note), and a stream whose retention is not ``limits`` is read with
message gets, never a consumer. That is the way out of a stream journald refuses to bind
because its retention cannot be edited: copy the runs to a directory, recreate the stream,
copy them back (the refusal prints those four commands).

Each run is verified on the source (hash chain and schemas), copied record by record with the
source's canonical bytes (both backends store exactly ``Record.raw``), and verified on the
destination; the destination's last hash must equal the source's, which pins every byte of
the chain. A run that already exists at the destination is refused before anything is
written (nothing is ever overwritten); a copy that fails half-way is deleted from the
destination so the migration can simply be run again. Writers should be stopped while their
runs migrate: the copy is of what the source holds when it is read.

A run moves with its side data (``SideStores``): every checkpoint (same id, same
``encode_file`` bytes: read back from the destination and compared, and its content hash
recomputed) and every attachment its records or checkpoints reference (read back and its
SHA-256 checked). The file side is the run's own ``checkpoints/`` and ``attachments/``; the
JetStream side is the stream's buckets (``journald.storage.jetstream_buckets``; a source stream
without buckets has no side data). Checkpoints and attachments are write-once with the same
bytes accepted again, so a migration interrupted after some of them is simply run again once
the half copy has been deleted (which the failure does itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from journald.cli.main import add_nats_arguments, nats_options
from journald.core.checkpoints import content_hash, encode_file
from journald.core.errors import (
    AttachmentNotFound,
    JournaldError,
    SessionExists,
    StoreCorrupted,
)
from journald.core.pages import referenced_pages
from journald.core.records import GENESIS, Record, sha256_hex, validate_id
from journald.server.startup import EXIT_CONFIG, StartupRefused
from journald.storage.base import Store
from journald.storage.checkpoint_base import OWNER, AttachmentStore, CheckpointStore
from journald.storage.jetstream_options import NatsOptions, NatsOptionsError
from journald.storage.pages import PageStore
from journald.storage.registry import BACKENDS, OpenedBackend, open_backend, parse_location

BATCH = 64


@dataclass(frozen=True, slots=True)
class MigratedRun:
    run_id: str
    records: int
    bytes: int
    last_hash: str
    checkpoints: int = 0
    attachments: int = 0


@dataclass(frozen=True, slots=True)
class SideStores:
    """Where one location keeps its runs' checkpoints and attachments (None: it has none)."""

    checkpoints: CheckpointStore | None = None
    attachments: AttachmentStore | None = None

    @classmethod
    def of(cls, opened: OpenedBackend) -> SideStores:
        return cls(opened.checkpoints, opened.attachments)


def referenced_digests(value: object) -> set[str]:
    """The SHA-256 of every attachment block anywhere in a record payload or message list."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "attachment" and isinstance(item.get("sha256"), str):
                found.add(item["sha256"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


async def _copy_side(
    run_id: str, records: Sequence[Record], src: SideStores, dst: SideStores
) -> tuple[int, int]:
    """Copy the run's checkpoints and referenced attachments; each is read back from the
    destination and compared. Returns (checkpoints, attachments) copied."""
    digests: set[str] = set()
    for rec in records:
        digests |= referenced_digests(rec.payload)
    if src.attachments is not None:
        # message pages go with the records that reference them, as do the attachments
        # their messages name (docs/design.md#message-pages)
        rebases = [r.payload for r in records if r.kind == "rebase"]
        pages = await PageStore(src.attachments).read(run_id, referenced_pages(rebases))
        for digest, raw in pages.items():
            digests.add(digest)
            digests |= referenced_digests(json.loads(raw))
    copied_cps = 0
    if src.checkpoints is not None and dst.checkpoints is not None:
        for meta in await src.checkpoints.list(run_id):
            cp = await src.checkpoints.get(run_id, meta.checkpoint_id)
            await dst.checkpoints.put(cp)
            back = await dst.checkpoints.get(run_id, meta.checkpoint_id)
            if encode_file(back) != encode_file(cp) or content_hash(back.messages) != meta.hash:
                raise StoreCorrupted(
                    f"run {run_id}: checkpoint {meta.checkpoint_id} reads back from the "
                    "destination different from the source",
                    metadata={"run_id": run_id, "checkpoint_id": meta.checkpoint_id},
                )
            digests |= referenced_digests(cp.messages)
            copied_cps += 1
        # the uid the run belongs to on a shared daemon (docs/design.md#who-may-talk-to-whom)
        owner = await src.checkpoints.load_mark(run_id, OWNER)
        if owner is not None:
            await dst.checkpoints.save_mark(run_id, owner, OWNER)
    copied_atts = 0
    if src.attachments is not None and dst.attachments is not None:
        for digest in sorted(digests):
            try:
                data = await src.attachments.get(run_id, digest)
            except AttachmentNotFound:
                continue  # referenced but never uploaded: nothing to carry
            await dst.attachments.put(run_id, data)
            if sha256_hex(await dst.attachments.get(run_id, digest)) != digest:
                raise StoreCorrupted(
                    f"run {run_id}: attachment {digest} reads back from the destination "
                    "with other bytes",
                    metadata={"run_id": run_id, "sha256": digest},
                )
            copied_atts += 1
    return copied_cps, copied_atts


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


def _check_whole(run_id: str, records: Sequence[Record]) -> None:
    """A run migrates whole: seqs 1..n, one unbroken chain from the genesis hash."""
    prev = GENESIS
    for i, rec in enumerate(records, start=1):
        if rec.seq != i or rec.prev != prev:
            raise StoreCorrupted(
                f"run {run_id} cannot be migrated: its records are not one unbroken chain "
                f"from seq 1 (at seq {rec.seq}); a pruned or repaired run keeps its history "
                "only in its source backend",
                metadata={"run_id": run_id, "seq": rec.seq},
            )
        prev = rec.hash


async def _copy_run(
    src: Store,
    dst: Store,
    run_id: str,
    progress: Progress | None,
    overall: Any,
    sides: tuple[SideStores, SideStores],
) -> MigratedRun:
    before = await src.verify(run_id)
    records = await src.load(run_id)
    records = [r for r in records if r.seq <= before.last_seq]
    _check_whole(run_id, records)
    task = progress.add_task(f"{run_id}", total=len(records)) if progress is not None else None
    journal = await dst.create(records[0])
    try:
        if progress is not None and task is not None:
            progress.advance(task)
        for i in range(1, len(records), BATCH):
            batch = records[i : i + BATCH]
            results = await journal.append(batch)
            for rec, res in zip(batch, results, strict=True):
                if res.hash != rec.hash:
                    raise StoreCorrupted(
                        f"run {run_id}: the destination stored seq {rec.seq} with hash "
                        f"{res.hash}, not the source's {rec.hash}",
                        metadata={"run_id": run_id, "seq": rec.seq},
                    )
            if progress is not None and task is not None:
                progress.advance(task, len(batch))
        await journal.close()
        side_counts = await _copy_side(run_id, records, *sides)
    except BaseException:
        await journal.close()
        with suppress(Exception):
            await dst.delete(run_id)  # leave nothing half-copied behind
        for side in (sides[1].checkpoints, sides[1].attachments):
            if side is not None:
                with suppress(Exception):
                    await side.drop_run(run_id)
        raise
    after = await dst.verify(run_id)
    if (after.last_seq, after.last_hash) != (before.last_seq, before.last_hash):
        raise StoreCorrupted(
            f"run {run_id}: the copy ends at seq {after.last_seq} hash {after.last_hash}, the "
            f"source at seq {before.last_seq} hash {before.last_hash}; the destination copy "
            "was kept for inspection",
            metadata={"run_id": run_id},
        )
    if progress is not None and overall is not None:
        progress.advance(overall)
    if progress is not None and task is not None:
        progress.remove_task(task)  # one bar per run in flight, not one line per run done
    size = sum(len(r.raw) for r in records)
    return MigratedRun(run_id, len(records), size, after.last_hash, *side_counts)


async def migrate(
    src: Store,
    dst: Store,
    run_ids: list[str] | None = None,
    progress: Progress | None = None,
    sides: tuple[SideStores, SideStores] = (SideStores(), SideStores()),
) -> list[MigratedRun]:
    """Copy ``run_ids`` (default: every run of ``src``) to ``dst``, with their checkpoints and
    attachments from ``sides[0]`` to ``sides[1]`` (``SideStores.of`` an opened location).

    Refuses with ``SessionExists`` (naming every clash) before writing anything if any run
    already exists in ``dst``; raises ``StoreCorrupted`` if a chain does not verify on either
    side. ``progress`` (a rich ``Progress``, e.g. ``new_progress()``) shows one bar per run.
    """
    if run_ids is None:
        ids = [info.run_id for info in await src.list()]
        ids.reverse()  # oldest first
    else:
        ids = [validate_id(r) for r in run_ids]
    clashes = [r for r in ids if await dst.exists(r)]
    if clashes:
        raise SessionExists(
            f"{len(clashes)} run(s) already exist at the destination: {', '.join(clashes)}; "
            "migrate never overwrites: delete them there first or leave them out",
            metadata={"run_ids": ",".join(clashes)},
        )
    for r in ids:
        if not await src.exists(r):
            await src.load(r)  # raises SessionNotFound naming the run
    overall = progress.add_task("runs", total=len(ids)) if progress is not None else None
    out: list[MigratedRun] = []
    for run_id in ids:
        out.append(await _copy_run(src, dst, run_id, progress, overall, sides))
    return out


# --- command line -----------------------------------------------------------------------


async def open_location(
    text: str, options: NatsOptions | None = None, *, source: bool = False
) -> OpenedBackend:
    """Open a store location (``NAME:REST`` of a registered backend); a JetStream source is
    bound read-only, so runs can be copied out of a stream journald would refuse to write
    (its refusal prints that route)."""
    name, opts = parse_location(text)
    return await open_backend(name, replace(opts, nats=options, read_only=source))


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
