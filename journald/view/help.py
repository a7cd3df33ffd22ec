"""The ``?`` screen: every key of the screen under it (its own, its focused widget's and the
app's), read from the bindings themselves so the list cannot drift from what the keys do."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

KEY_NAMES = {
    "slash": "/",
    "colon": ":",
    "question_mark": "?",
    "space": "space",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "home": "Home",
    "end": "End",
    "escape": "esc",
}
EXTRA_WORDS = {  # what a binding's short description leaves out
    "Filter": "filter: status:held label:team=blue text (esc clears)",
    "Search": "search the whole run (enter: the nearest older match)",
    "Go to": "go to message N, s N (seq), t 14:03 (time)",
    "Top": "the first message of the run",
    "Follow": "the end of the run, following it live",
    "Fold": "fold or expand the entry under the cursor",
    "Records": "the run's records as stored: timeline, raw JSON (y copies it)",
    "Copy": "copy the entry under the cursor",
    "Fork from the marker": "fork a new run from a checkpoint or compaction marker",
    "Restore to the marker": "restore the checkpoint of a checkpoint or compaction marker",
}


def key_text(key: str) -> str:
    """``up,k`` -> ``up / k``; ``slash`` -> ``/``."""
    return " / ".join(KEY_NAMES.get(k, k) for k in key.split(","))


def _bindings(node: DOMNode) -> Iterable[Binding]:
    for b in node.BINDINGS:
        if isinstance(b, Binding):
            yield b
        elif isinstance(b, tuple):
            yield Binding(*b)


def keys_of(screen: Screen[object]) -> list[tuple[str, str, str]]:
    """(where, keys, what) for every binding that acts on ``screen``: its focused widget's
    first, then the screen's, then the app's."""
    out: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    nodes: list[tuple[str, DOMNode]] = []
    if screen.focused is not None:
        nodes.append((screen.focused.id or type(screen.focused).__name__, screen.focused))
    nodes += [(type(screen).__name__.removesuffix("Screen").lower(), screen), ("app", screen.app)]
    for where, node in nodes:
        for b in _bindings(node):
            if b.key in seen or b.action in ("help",):
                continue
            seen.add(b.key)
            what = EXTRA_WORDS.get(b.description, b.description or b.action)
            out.append((where, key_text(b.key), what))
    out.append(("app", "?", "this help (esc closes it)"))
    return out


class HelpScreen(ModalScreen[None]):
    """Every key, grouped by where it acts; esc, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 90%; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close"),
    ]

    def __init__(self, under: Screen[object]) -> None:
        super().__init__()
        self.rows = keys_of(under)

    def compose(self) -> ComposeResult:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for where, keys, what in self.rows:
            grid.add_row(where, keys, what)
        with VerticalScroll():
            yield Static("[b]Keys[/b]\n")
            yield Static(grid, id="keys")

    def action_close(self) -> None:
        self.dismiss(None)

    def text(self) -> str:
        """The help as plain lines (tests read this)."""
        return "\n".join(f"{w} {k} {t}" for w, k, t in self.rows)
