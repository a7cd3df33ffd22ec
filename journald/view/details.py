"""The details screen of one run: fingerprint, counters and tokens, the pending turn, the
checkpoints (take, restore, fork, export, each after a confirmation) and the verify result.

The facts come from Fold without the messages (cheap for a long run) and the same
``show_fields`` the ``journald show`` command prints; verify runs in the background.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from journald_client import CheckpointMeta, JournaldError, RestoreResult, VerifyResult
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Input, Label, Static

from journald.cli.commands import show_fields
from journald.cli.replay import one_line
from journald.view.base import DaemonScreen, describe_error
from journald.view.data import Details
from journald.view.runs import STATUS_STYLES, short_time


@dataclass(frozen=True, slots=True)
class Ask:
    """What a confirmation dialog asks, and an optional text field (label, fork id, path)."""

    title: str
    body: str
    action: str  # the button's word
    field: str = ""  # the input's placeholder; empty: no input
    value: str = ""


class Confirm(ModalScreen[str | None]):
    """Yes (with the field's text) or no."""

    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Vertical {
        width: 64; max-width: 100%; height: auto; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    Confirm #title { text-style: bold; margin-bottom: 1; }
    Confirm Grid { grid-size: 2; grid-gutter: 1 2; height: auto; margin-top: 1; }
    Confirm Button { width: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, ask: Ask) -> None:
        super().__init__()
        self.ask = ask

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.ask.title, id="title")
            yield Static(self.ask.body, id="body")
            if self.ask.field:
                yield Input(self.ask.value, placeholder=self.ask.field, id="field")
            with Grid():
                yield Button(self.ask.action, variant="primary", id="yes")
                yield Button("Cancel", id="no")

    def on_mount(self) -> None:
        target = "#field" if self.ask.field else "#no"
        self.query_one(target).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self._answer(event.button.id == "yes")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._answer(True)

    def _answer(self, yes: bool) -> None:
        value = self.query_one("#field", Input).value.strip() if self.ask.field else ""
        self.dismiss(value if yes else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


FIRST = ("status", "records", "counters", "tokens", "pending", "last stop", "next iteration")


def fact_rows(d: Details) -> list[tuple[str, str]]:
    """The run's facts as (label, value): status and counters first (what fits a small
    terminal), then the fingerprint fields, then the rest of what ``journald show`` prints."""
    shown = dict(show_fields(d.state, d.info))
    rows = [(k, shown.pop(k)) for k in FIRST if k in shown]
    rows.insert(1, ("messages", f"{d.message_count:,}"))
    if d.info is not None and d.info.holder is not None:
        h = d.info.holder
        rows.insert(1, ("holder", f"{h.name or '-'} · pid {h.pid} · {h.host} · since {h.since}"))
    fp = d.state.fingerprint
    if fp is not None:
        rows += [
            ("provider", fp.provider),
            ("model", fp.model),
            ("system prompt", fp.system_prompt_sha256[:16] + "…"),
            ("tools", fp.tools_sha256[:16] + "…"),
            ("thinking", fp.thinking),
            ("max tokens", str(fp.max_tokens)),
            ("max iterations", str(fp.max_iterations)),
        ]
    for key in ("run", "model", "config", "messages"):
        shown.pop(key, None)
    rows += list(shown.items())
    return [(k, one_line(v)) for k, v in rows]


def verify_text(v: VerifyResult | JournaldError | None) -> Text:
    if v is None:
        return Text("verify: checking the hash chain…", style="italic")
    if isinstance(v, JournaldError):
        return Text(f"verify FAILED: {describe_error(v)}", style="bold red")
    segs = f"{v.segments} segment{'s' if v.segments != 1 else ''}"
    return Text(
        f"verify: ok, {v.records:,} records in {segs}, hash chain intact, last seq {v.last_seq}"
    )


class DetailsScreen(DaemonScreen):
    DEFAULT_CSS = """
    DetailsScreen #head { dock: top; height: 1; padding: 0 1; background: $panel; }
    DetailsScreen #facts-box { height: 1fr; }
    DetailsScreen #facts { height: auto; padding: 0 1; }
    DetailsScreen #verify { height: auto; padding: 0 1; background: $panel; }
    DetailsScreen .title { text-style: bold; padding: 0 1; }
    DetailsScreen #checkpoints { height: 6; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("c", "take", "Checkpoint"),
        Binding("r", "restore", "Restore", show=False),
        Binding("f", "fork", "Fork", show=False),
        Binding("e", "export", "Export", show=False),
        Binding("v", "verify", "Verify"),
        Binding("o", "open_fork", "Open the fork", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.details: Details | None = None
        self.checkpoints: list[CheckpointMeta] = []
        self.verified: VerifyResult | JournaldError | None = None
        self.facts: Table | None = None
        self.last_fork = ""  # the run the last f made (o opens its transcript)

    def compose(self) -> ComposeResult:
        yield Static(f"details of run {self.run_id}", id="head")
        with VerticalScroll(id="facts-box"):
            yield Static("loading…", id="facts")
        yield Static(verify_text(None), id="verify")
        yield Label("checkpoints (c take · r restore · f fork · e export)", classes="title")
        table: DataTable[str] = DataTable(cursor_type="row", id="checkpoints")
        for key in ("id", "trigger", "label", "seq", "messages", "created"):
            table.add_column(key.upper(), key=key)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.reconnected()

    def reconnected(self) -> None:
        self.fetch(lambda: self.source.details(self.run_id), self._got, group="details")
        self.action_verify()

    def _got(self, d: Details) -> None:
        self.details = d
        self.checkpoints = list(d.checkpoints)
        # a grid, so a long value wraps under itself, not under the labels
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(overflow="fold")
        for k, v in fact_rows(d):
            style = "bold" if k == "pending" and v != "none" else ""
            if k == "status":
                style = STATUS_STYLES.get(v.split()[0] if v else "", "bold")
            grid.add_row(k, Text(v, style=style))
        self.facts = grid
        self.query_one("#facts", Static).update(grid)
        self._show_checkpoints()

    def _show_checkpoints(self) -> None:
        table: DataTable[str] = self.query_one(DataTable)
        table.clear()
        for c in self.checkpoints:
            table.add_row(
                c.checkpoint_id,
                c.trigger,
                one_line(c.label) or "-",
                str(c.seq),
                str(c.message_count),
                short_time(c.created),
                key=c.checkpoint_id,
            )
        if not self.checkpoints:
            table.add_row("(none yet: c takes one)", "", "", "", "", "")

    def selected(self) -> CheckpointMeta | None:
        table: DataTable[str] = self.query_one(DataTable)
        if 0 <= table.cursor_row < len(self.checkpoints):
            return self.checkpoints[table.cursor_row]
        self.notify("select a checkpoint first (c takes one)", severity="warning")
        return None

    # --- actions ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_verify(self) -> None:
        def done(v: VerifyResult) -> None:
            self.verified = v
            self.query_one("#verify", Static).update(verify_text(v))

        def failed(err: JournaldError) -> None:
            self.verified = err
            self.query_one("#verify", Static).update(verify_text(err))

        self.query_one("#verify", Static).update(verify_text(None))
        self.fetch(lambda: self.source.verify(self.run_id), done, group="verify", failed=failed)

    def _confirm(self, ask: Ask, then: object) -> None:
        def answered(value: str | None) -> None:
            if value is not None and callable(then):
                then(value)

        self.app.push_screen(Confirm(ask), answered)

    def action_take(self) -> None:
        ask = Ask(
            "Take a checkpoint",
            f"Copy the folded conversation of run {self.run_id} as a read-only checkpoint.",
            "Take",
            field="label (optional)",
        )
        self._confirm(ask, self._take)

    def _take(self, label: str) -> None:
        def done(meta: CheckpointMeta) -> None:
            self.notify(f"checkpoint {meta.checkpoint_id} taken at seq {meta.seq}")
            self.reconnected()

        self.fetch(lambda: self.source.take_checkpoint(self.run_id, label), done)

    def action_restore(self) -> None:
        c = self.selected()
        if c is None:
            return
        ask = Ask(
            "Restore this checkpoint?",
            f"Run {self.run_id} goes back to checkpoint {c.checkpoint_id} "
            f"({c.message_count} messages, seq {c.seq}). The current conversation is kept "
            "first in a pre_restore checkpoint; the journal only grows (a rebase record).",
            "Restore",
        )
        self._confirm(ask, lambda _: self._restore(c.checkpoint_id))

    def _restore(self, checkpoint_id: str) -> None:
        def done(r: RestoreResult) -> None:
            self.notify(
                f"restored: {r.from_messages} -> {r.to_messages} messages "
                f"(pre_restore checkpoint {r.pre_restore_checkpoint_id or 'none'})"
            )
            self.reconnected()

        self.fetch(lambda: self.source.restore(self.run_id, checkpoint_id), done)

    def action_fork(self) -> None:
        c = self.selected()
        if c is None:
            return
        ask = Ask(
            "Fork a new run from this checkpoint?",
            f"A new run starts from checkpoint {c.checkpoint_id} of {self.run_id}; the source "
            "is untouched.",
            "Fork",
            field="new run id (empty: the daemon picks one)",
        )
        self._confirm(ask, lambda new_id: self._fork(c.checkpoint_id, new_id))

    def _fork(self, checkpoint_id: str, new_id: str) -> None:
        def done(run_id: str) -> None:
            self.last_fork = self.viewer.last_fork = run_id
            self.notify(f"forked run {run_id} (o opens it, here or on the runs)", markup=False)

        self.fetch(lambda: self.source.fork(self.run_id, checkpoint_id, new_id), done)

    def action_open_fork(self) -> None:
        if self.last_fork:
            self.viewer.open_transcript(self.last_fork)
        else:
            self.notify("no fork made here yet (f forks from the selected checkpoint)")

    def action_export(self) -> None:
        c = self.selected()
        if c is None:
            return
        default = f"{self.run_id}-{c.checkpoint_id}.checkpoint"
        ask = Ask(
            "Export this checkpoint?",
            "Writes self-contained journald-checkpoint/1 bytes (attachments included) that "
            "`journald import` reads back.",
            "Export",
            field="file to write",
            value=default,
        )
        self._confirm(ask, lambda path: self._export(c.checkpoint_id, path or default))

    def _export(self, checkpoint_id: str, path: str) -> None:
        target = Path(path).expanduser()

        def done(size: int) -> None:
            self.notify(f"wrote {size:,} bytes to {target}")

        def failed(err: JournaldError) -> None:
            self.show_error(err)

        def call() -> int:
            try:
                return self.source.export(self.run_id, checkpoint_id, target)
            except OSError as exc:
                raise JournaldError(f"cannot write {target}: {exc.strerror or exc}") from exc

        self.fetch(call, done, failed=failed)
