"""The client commands of the journald CLI: ``ls``, ``show``, ``replay``, ``tail``, ``rm``
(``verify`` is ``journald.cli.verify``). Every one talks to the daemon through
``journald_client`` (never to the files); how a command is registered and run, and its exit
codes, are ``journald.cli.dispatch``'s.

Output: ``rich`` styling on a terminal, plain text when piped (``--json`` where offered);
text from the journal is cleaned of terminal escapes before it is shown (``journald.cli.replay``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from journald_client import JournalRecord, NotFoundError, RunInfo, RunState

from journald.cli import replay
from journald.cli.dispatch import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, Command, Context
from journald.cli.replay import Line, cell_width, elide_end, one_line

# --- helpers ---------------------------------------------------------------------------


def short_ts(ts: str) -> str:
    """``2026-11-30T12:00:00.000000Z`` → ``2026-11-30 12:00:00``."""
    return ts.replace("T", " ")[:19] if ts else "-"


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def info_json(i: RunInfo) -> dict[str, Any]:
    return {
        "run_id": i.run_id,
        "model": i.model,
        "status": i.status,
        "created": i.created,
        "updated": i.updated,
        "records": i.record_count,
        "last_seq": i.last_seq,
        "bytes": i.bytes,
        "prompt_preview": i.prompt_preview,
        "error": i.error,
    }


def table(rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """Left-aligned columns; the last column is cut to fit ``width``."""
    if not rows:
        return []
    ncol = len(rows[0])
    widths = [max(cell_width(r[c]) for r in rows) for c in range(ncol - 1)]
    out = []
    for r in rows:
        cells = [r[c] + " " * (widths[c] - cell_width(r[c])) for c in range(ncol - 1)]
        head = "  ".join(cells) + "  "
        out.append((head + elide_end(r[-1], max(10, width - cell_width(head)))).rstrip())
    return out


# --- ls --------------------------------------------------------------------------------


def _add_ls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.add_argument("-n", "--limit", type=int, default=0, help="at most this many runs")


def _run_ls(ctx: Context, args: argparse.Namespace) -> int:
    runs = ctx.client.list(limit=max(0, args.limit))
    if args.json:
        ctx.json([info_json(i) for i in runs])
        return EXIT_OK
    if not runs:
        ctx.note("no runs yet")
        return EXIT_OK
    rows = [
        [
            one_line(i.run_id),
            one_line(i.model) or "-",
            one_line(i.status),
            short_ts(i.updated),
            str(i.record_count),
            one_line(i.error or i.prompt_preview),  # a damaged run: why, where the prompt goes
        ]
        for i in runs
    ]
    header = ["RUN", "MODEL", "STATUS", "UPDATED", "RECORDS", "PROMPT"]
    if ctx.tty:
        from rich.table import Table

        # as in the plain table, only the prompt gives way to the width
        widths = [max(cell_width(r[c]) for r in [header, *rows]) for c in range(5)]
        room = max(4, ctx.width - sum(w + 2 for w in widths))
        t = Table(box=None, pad_edge=False, header_style="bold")
        for h in header:
            t.add_column(h, no_wrap=True, overflow="ellipsis")
        for r in rows:
            style = {"held": "yellow", "corrupted": "red"}.get(r[2])
            t.add_row(*r[:-1], elide_end(r[-1], room), style=style)
        ctx.console.print(t)
    else:
        ctx.text("\n".join(table([header, *rows], ctx.width)))
    return EXIT_OK


# --- show ------------------------------------------------------------------------------


def _find(ctx: Context, run_id: str) -> RunInfo | None:
    return next((i for i in ctx.client.list() if i.run_id == run_id), None)


def _status(state: RunState, info: RunInfo | None) -> str:
    if info is not None and info.status:
        return info.status
    if state.terminal is not None and state.terminal_is_last:
        return state.terminal.reason
    return "open"


def show_fields(state: RunState, info: RunInfo | None) -> list[tuple[str, str]]:
    """The ``show`` facts as (label, value) pairs (pure; cleaned, one line each)."""
    fp = state.fingerprint
    c = state.counters
    rows: list[tuple[str, str]] = [
        ("run", state.run_id),
        ("status", _status(state, info)),
        ("model", f"{fp.provider}/{fp.model}" if fp else "-"),
    ]
    if fp:
        rows.append(
            (
                "config",
                f"thinking {fp.thinking}, max_tokens {fp.max_tokens}, "
                f"max_iterations {fp.max_iterations}",
            )
        )
    rows.append(("interactive", "yes" if state.interactive else "no"))
    if info is not None:
        rows.append(("created", info.created or "-"))
        rows.append(("updated", info.updated or "-"))
    count = f"{info.record_count}, " if info is not None else ""
    rows.append(("records", f"{count}last seq {state.last_seq}"))
    rows.append(("messages", str(len(state.messages))))
    rows.append(("next iteration", str(state.next_iteration)))
    rows.append(("last stop", state.last_stop_reason or "-"))
    rows.append(
        (
            "counters",
            f"llm calls {c.llm_calls}, tool calls {c.tool_calls} (remote {c.remote_tool_calls})",
        )
    )
    rows.append(
        (
            "tokens",
            f"in {c.input_tokens}, out {c.output_tokens}, cache read {c.cache_read_tokens}, "
            f"cache create {c.cache_creation_tokens}",
        )
    )
    p = state.pending
    if p is not None:
        unanswered = ", ".join(f"{x.id} ({x.name})" for x in p.unanswered) or "none"
        rows.append(
            (
                "pending",
                f"iteration {p.iteration} (seq {p.seq}): {len(p.answered_ids)} of "
                f"{len(p.calls)} tool calls answered; unanswered: {unanswered}; a resume "
                "runs only the unanswered calls",
            )
        )
    else:
        rows.append(("pending", "none"))
    if state.resume_at_input_boundary:
        rows.append(("resume", "at the input boundary (waits for the user)"))
    if state.terminal is not None:
        t = state.terminal
        end = t.reason + (f": {t.message}" if t.message else "")
        rows.append(("terminal", end + ("" if state.terminal_is_last else " (resumed since)")))
    if state.labels:
        rows.append(("labels", ", ".join(f"{k}={v}" for k, v in sorted(state.labels.items()))))
    if state.lineage and state.lineage.get("forked_from_run_id"):
        lin = state.lineage
        rows.append(
            (
                "forked from",
                f"{lin['forked_from_run_id']} at seq {lin.get('forked_at_seq', 0)}"
                + (
                    f" (checkpoint {lin['forked_from_checkpoint_id']})"
                    if lin.get("forked_from_checkpoint_id")
                    else ""
                ),
            )
        )
    for a in state.anomalies:
        rows.append(("anomaly", f"seq {a.seq} {a.kind}: {a.detail}"))
    prompt = " ".join(
        str(b.get("text", "")) for b in state.prompt if b.get("type") == "text"
    ).strip()
    rows.append(("prompt", prompt or "-"))
    return [(k, one_line(v)) for k, v in rows]


def _add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_show(ctx: Context, args: argparse.Namespace) -> int:
    state = ctx.client.fold(args.run)
    info = _find(ctx, args.run)
    fields = show_fields(state, info)
    if args.json:
        ctx.json(
            {
                "fields": dict(fields),
                "counters": asdict(state.counters),
                "next_iteration": state.next_iteration,
                "last_seq": state.last_seq,
                "last_hash": state.last_hash,
                "pending_unanswered": [c.id for c in state.pending.unanswered]
                if state.pending
                else [],
                "info": info_json(info) if info else None,
            }
        )
        return EXIT_OK
    pad = max(len(k) for k, _ in fields)
    ctx.lines(
        Line("pending" if k == "pending" and v != "none" else "text", f"{k:<{pad}}  {v}")
        for k, v in fields
    )
    return EXIT_OK


# --- replay ----------------------------------------------------------------------------


def _add_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument(
        "--mode",
        choices=replay.MODES,
        default="dump",
        help="narrate: what a resume narrates (tool output hidden); dump: every message with "
        "`<- [id]` result lines; transcript: each call paired with its result",
    )
    p.add_argument("--no-output", action="store_true", help="dump: hide tool result text")
    p.add_argument("--width", type=int, default=0, help="line width (default: the terminal's)")
    p.add_argument("--json", action="store_true", help="transcript: print the structured lines")


def _run_replay(ctx: Context, args: argparse.Namespace) -> int:
    state = ctx.client.fold(args.run)
    width = args.width or ctx.width
    if args.json:
        ctx.json([asdict(t) for t in replay.transcript(state)])
        return EXIT_OK
    ctx.lines(replay.render(state, args.mode, width, show_output=not args.no_output))
    return EXIT_OK


# --- tail ------------------------------------------------------------------------------


def record_summary(rec: JournalRecord, width: int) -> str:
    """One line for a record: ``seq ts kind summary`` (pure; cleaned and cut to ``width``)."""
    p = rec.payload
    if rec.kind == "assistant":
        msg = p.get("message", {})
        parts = []
        for b in msg.get("content", []):
            if b.get("type") == "text":
                parts.append(one_line(str(b.get("text", ""))))
            elif b.get("type") == "tool_use":
                parts.append(
                    f"-> [{one_line(str(b.get('id', '')))}] {one_line(str(b.get('name')))}"
                )
        what = f"it {p.get('iteration', '?')} {p.get('stop_reason', '')}: " + " | ".join(parts)
    elif rec.kind == "tool_result":
        err = "error: " if p.get("is_error") else ""
        what = f"<- [{one_line(str(p.get('tool_use_id', '')))}] {err}" + one_line(
            replay.result_text(p)
        )
    elif rec.kind == "user":
        what = one_line(replay.result_text(p))
    elif rec.kind == "terminal":
        what = f"{p.get('reason', '')}" + (
            f": {one_line(str(p['message']))}" if p.get("message") else ""
        )
    elif rec.kind == "rebase":
        cov = p.get("covered") or {}
        tail = len(p.get("messages", []))
        # a paged rebase's conversation is its pages' messages, then the inline tail
        pages = 128 * len(rec.page_chunks) + len(rec.pages)  # a chunk names 128 pages
        held = f" ({pages} pages, {tail} inline)" if pages else ""
        what = (
            f"{p.get('reason', '')}: {rec.paged_messages + tail} messages{held} replace seq "
            f"{cov.get('from_seq', '?')}..{cov.get('to_seq', '?')}"
        )
    elif rec.kind == "meta":
        what = f"run {one_line(str(p.get('run_id', '')))}"
    elif rec.kind == "state":
        where = one_line(f"{p.get('namespace', '')} {p.get('key', '')}".rstrip())
        if p.get("deleted"):
            what = f"{where} deleted"
        else:
            b64 = str(p.get("data", ""))
            size = p.get("size", len(b64) * 3 // 4 - b64[-2:].count("="))
            held = "attachment" if p.get("sha256") else "inline"
            what = f"{where} {one_line(str(p.get('type', '')))} {size} B {held}"
    else:
        what = ""
    line = f"{rec.seq:>6} {short_ts(rec.ts)} {rec.kind:<11} {what}"
    return elide_end(line.rstrip(), max(20, width))


def _add_tail(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing records as they are appended (exits when the run is deleted)",
    )
    p.add_argument(
        "-n",
        "--lines",
        type=int,
        default=None,
        help="print the last N records first (default: 10, or 0 with -f)",
    )
    p.add_argument("--json", action="store_true", help="print each record's canonical JSON")


def _print_record(ctx: Context, rec: JournalRecord, as_json: bool) -> None:
    if as_json:
        ctx.text(rec.canonical.decode("utf-8"))
        return
    kind = {"tool_result": "error" if rec.payload.get("is_error") else "result"}.get(
        rec.kind, "call" if rec.kind == "assistant" else "text"
    )
    ctx.lines([Line(kind, record_summary(rec, ctx.width))])


def _run_tail(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client
    last = client.fold(args.run).last_seq
    n = args.lines if args.lines is not None else (0 if args.follow else 10)
    start = max(1, last - max(0, n) + 1)
    if not args.follow:
        for rec in client.load(args.run, start) if n > 0 else []:
            _print_record(ctx, rec, args.json)
        return EXIT_OK
    from_seq = start if n > 0 else last + 1
    watch = client.watch(args.run, from_seq)
    ctx.note(f"following run {args.run} from seq {from_seq} (Ctrl-C to stop)")
    try:
        for rec in watch:
            _print_record(ctx, rec, args.json)
    except KeyboardInterrupt:
        watch.cancel()
        return EXIT_INTERRUPTED
    try:
        client.fold(args.run)
    except NotFoundError:
        ctx.note(f"run {args.run} was deleted")
        return EXIT_OK
    ctx.note(f"the daemon ended the tail of run {args.run} (shutting down?)")
    return EXIT_OK


# --- rm --------------------------------------------------------------------------------


def _add_rm(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="+", help="run id (several: each is deleted)")
    p.add_argument("-f", "--force", action="store_true", help="succeed when a run does not exist")


def _run_rm(ctx: Context, args: argparse.Namespace) -> int:
    missing = []
    for run in args.run:
        if ctx.client.delete(run):
            ctx.note(f"deleted run {run}")
        else:
            missing.append(run)
    if missing and not args.force:
        for run in missing:
            ctx.note(f"run {run} does not exist (list runs with `journald ls`)")
        return EXIT_NOT_FOUND
    return EXIT_OK


COMMANDS = (
    Command("ls", "list runs, newest first", _add_ls, _run_ls),
    Command("show", "a run's status, model, counters and pending turn", _add_show, _run_show),
    Command(
        "replay",
        "render a run's conversation (narrate, dump, transcript)",
        _add_replay,
        _run_replay,
    ),
    Command("tail", "print a run's last records; -f follows appends live", _add_tail, _run_tail),
    Command("rm", "delete a run and its co-located checkpoints", _add_rm, _run_rm),
)
