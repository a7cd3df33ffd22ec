"""The transcript widget: a line-API scroll view over ``journald.view.model`` entries.

Only the lines on screen are rendered; the layout (lines per entry at the current width) is
recomputed when entries change, the width changes or an entry is folded or expanded. The
reader's place is kept by entry key, so new entries at the end, an earlier page added at the
top or a refreshed tail never move what the reader is looking at; while the view is at its
bottom it follows new entries.

A cursor selects one entry (``enter`` folds or expands it); moving it keeps it on screen.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from functools import lru_cache
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from journald.view.model import Entry, RenderedLine, find, render_entry

ROLES = (
    "label",
    "user",
    "assistant",
    "thinking",
    "call",
    "result",
    "error",
    "pending",
    "note",
    "dim",
    "more",
)
NEAR_EDGE_LINES = 3  # ask for an earlier (later) page this close to the top (bottom)
LAYOUT_CACHE_ENTRIES = 8192  # laid-out entries kept (a page back lays out only the new page)


@lru_cache(maxsize=LAYOUT_CACHE_ENTRIES)
def _lines_of(entry: Entry, width: int, expanded: bool) -> list[RenderedLine]:
    return render_entry(entry, width, expanded)


class TranscriptView(ScrollView, can_focus=True):
    """Entries laid out as lines; follows the end while the reader is at the bottom."""

    COMPONENT_CLASSES = {f"transcript--{r}" for r in ROLES} | {
        "transcript--cursor",
        "transcript--match",
    }
    DEFAULT_CSS = """
    TranscriptView { background: $surface; color: $foreground; }
    TranscriptView > .transcript--label { color: $text-secondary; text-style: bold; }
    TranscriptView > .transcript--user { color: $text-success; }
    TranscriptView > .transcript--assistant { color: $foreground; }
    TranscriptView > .transcript--thinking { color: $text-muted; text-style: italic; }
    TranscriptView > .transcript--call { color: $text-primary; }
    TranscriptView > .transcript--result { color: $foreground-muted; }
    TranscriptView > .transcript--error { color: $text-error; text-style: bold; }
    TranscriptView > .transcript--pending { color: $text-warning; text-style: bold; }
    TranscriptView > .transcript--note { color: $text-secondary; }
    TranscriptView > .transcript--dim { color: $foreground-disabled; }
    TranscriptView > .transcript--more { color: $text-muted; text-style: italic; }
    TranscriptView > .transcript--cursor { background: $primary-muted; }
    TranscriptView > .transcript--match { background: $warning-muted; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("enter,space", "fold", "Fold"),
        Binding("home,g", "first", "Top", show=False),
        Binding("end,G", "last", "Follow"),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
    ]

    class NearTop(Message):
        """The reader reached the top: load an earlier page if there is one."""

    class NearBottom(Message):
        """The reader reached the bottom of what is loaded: load a later page if any."""

    class Edge(Message):
        """Home/End: the screen decides (the run's real start or end may not be loaded)."""

        def __init__(self, start: bool) -> None:
            super().__init__()
            self.start = start

    class Moved(Message):
        """The view scrolled (the screen says whether it still follows the end)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: list[Entry] = []
        self.expanded: set[tuple[int, int]] = set()
        self.cursor = 0
        self.search_query = ""
        self._lines: list[RenderedLine] = []
        self._starts: list[int] = []  # first line of each entry
        self._width = 0
        self.following = True  # at the bottom: new entries scroll into view

    # --- content ---------------------------------------------------------------------------

    @property
    def at_bottom(self) -> bool:
        """Whether the view follows the end (the reader has not scrolled up)."""
        return self.following

    def _to_end(self) -> None:
        self.following = True
        self.scroll_to(y=self.max_scroll_y_for_content, animate=False, immediate=True)

    def _scroll_update(self, virtual_size: Size) -> None:
        # A screen just pushed learns its size after the first entries are laid out: the
        # scroll offset is clamped to the old (empty) size then. Following means "at the end"
        # whatever the size becomes, so pin it here, where every size change passes.
        super()._scroll_update(virtual_size)
        if self.following and self.scroll_y != self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def set_entries(self, entries: Sequence[Entry], *, follow: bool | None = None) -> None:
        """Show ``entries``; keep the reader's place, or follow the end if the view was at
        its bottom (``follow`` overrides)."""
        follow = self.at_bottom if follow is None else follow
        self.following = follow  # not following: no size change may pin the view to the end
        anchor = self._anchor()
        cursor_key = self.entries[self.cursor].key if self.entries else None
        self.entries = list(entries)
        keys = {e.key: i for i, e in enumerate(self.entries)}
        self._layout()
        if follow or cursor_key not in keys:
            self.cursor = (
                max(0, len(self.entries) - 1)
                if follow
                else min(self.cursor, max(0, len(self.entries) - 1))
            )
        else:
            self.cursor = keys[cursor_key]
        if follow:
            self._to_end()
        elif anchor is not None and anchor[0] in keys:
            y = self._starts[keys[anchor[0]]] + anchor[1]
            self.scroll_to(y=y, animate=False, immediate=True)
        self.refresh()

    @property
    def max_scroll_y_for_content(self) -> int:
        return max(0, len(self._lines) - self.scrollable_content_region.height)

    def _anchor(self) -> tuple[tuple[int, int], int] | None:
        """The entry at the top of the view and the line offset into it."""
        if not self.entries or not self._starts:
            return None
        y = int(self.scroll_y)
        i = max(0, bisect_right(self._starts, y) - 1)
        # the "N earlier messages" line stays first when a page comes in above it: hold on
        # to the entry after it, so the reader stays where they were
        while i + 1 < len(self.entries) and self.entries[i].kind in ("gap", "marker"):
            i += 1
        return self.entries[i].key, y - self._starts[i]

    def _layout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width or 80
        self._width = width
        self._lines, self._starts = [], []
        for e in self.entries:
            self._starts.append(len(self._lines))
            self._lines.extend(_lines_of(e, width, e.key in self.expanded))
        self.virtual_size = Size(width, len(self._lines))

    def on_resize(self) -> None:
        if self.following:
            self._layout()
            self._to_end()
        elif self.scrollable_content_region.width != self._width:
            anchor = self._anchor()
            self._layout()
            if anchor is not None:
                keys = {e.key: i for i, e in enumerate(self.entries)}
                if anchor[0] in keys:
                    self.scroll_to(
                        y=self._starts[keys[anchor[0]]] + anchor[1], animate=False, immediate=True
                    )

    def line_texts(self) -> list[str]:
        """Every laid-out line as plain text (tests and search read this)."""
        return ["".join(t for t, _ in line) for line in self._lines]

    # --- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        entry_index = max(0, bisect_right(self._starts, index) - 1)
        extra = Style()
        if entry_index == self.cursor and self.has_focus:
            extra = Style(bgcolor=self.get_component_rich_style("transcript--cursor").bgcolor)
        segments: list[Segment] = []
        for text, role in self._lines[index]:
            # the full component style: its colours are blended with the background
            style = self.get_component_rich_style(f"transcript--{role}")
            segments.extend(self._highlight(text, style + extra))
        strip = Strip(segments).simplify()
        return strip.crop_extend(scroll_x, scroll_x + width, base + extra)

    def _highlight(self, text: str, style: Style) -> list[Segment]:
        if not self.search_query:
            return [Segment(text, style)]
        low, q = text.lower(), self.search_query.lower()
        hit = self.get_component_rich_style("transcript--match")
        match = style + Style(bgcolor=hit.bgcolor, bold=True)
        out, i = [], 0
        while (j := low.find(q, i)) >= 0:
            if j > i:
                out.append(Segment(text[i:j], style))
            out.append(Segment(text[j : j + len(q)], match))
            i = j + len(q)
        if i < len(text):
            out.append(Segment(text[i:], style))
        return out

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.following = new >= self.max_scroll_y
        self.post_message(self.Moved())
        if new <= NEAR_EDGE_LINES and new < old:
            self.post_message(self.NearTop())
        elif new >= self.max_scroll_y - NEAR_EDGE_LINES and new > old:
            self.post_message(self.NearBottom())

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # --- cursor, folding, search -------------------------------------------------------------

    def _show_cursor(self) -> None:
        if not self.entries:
            return
        top = self._starts[self.cursor]
        end = top + len(_lines_of(self.entries[self.cursor], self._width, self._is_open()))
        height = self.scrollable_content_region.height
        if top < self.scroll_y:
            self.scroll_to(y=top, animate=False, immediate=True)
        elif end > self.scroll_y + height:
            self.scroll_to(y=min(top, end - height), animate=False, immediate=True)
        self.refresh()

    def _is_open(self) -> bool:
        return self.entries[self.cursor].key in self.expanded

    def action_cursor(self, step: int) -> None:
        if self.entries:
            self.cursor = max(0, min(len(self.entries) - 1, self.cursor + step))
            self._show_cursor()
            if self.cursor == 0:
                self.post_message(self.NearTop())
            elif self.cursor == len(self.entries) - 1:
                self.post_message(self.NearBottom())

    def action_fold(self) -> None:
        if not self.entries or not self.entries[self.cursor].foldable:
            return
        key = self.entries[self.cursor].key
        self.expanded.symmetric_difference_update({key})
        anchor = self._anchor()
        self._layout()
        if anchor is not None:
            keys = {e.key: i for i, e in enumerate(self.entries)}
            self.scroll_to(
                y=self._starts[keys[anchor[0]]] + anchor[1], animate=False, immediate=True
            )
        self._show_cursor()

    def action_first(self) -> None:
        self.post_message(self.Edge(start=True))

    def action_last(self) -> None:
        self.post_message(self.Edge(start=False))

    def go_first(self) -> None:
        """The cursor and the view on the first entry loaded."""
        self.cursor = 0
        self.following = False
        self.scroll_to(y=0, animate=False, immediate=True)
        self.refresh()

    def go_last(self) -> None:
        """The cursor on the last entry loaded, following the end."""
        self.cursor = max(0, len(self.entries) - 1)
        self._to_end()
        self.refresh()

    def go_to_message(self, index: int, key: tuple[int, int] | None = None) -> bool:
        """The cursor on entry ``key`` (else the first entry of message ``index`` or after),
        at the top of the view; False when it is not loaded."""
        at = next((i for i, e in enumerate(self.entries) if key is not None and e.key == key), None)
        if at is None:  # the entry holding the message (a result is shown under its call)
            before = [i for i, e in enumerate(self.entries) if 0 <= e.key[0] <= index]
            after = (i for i, e in enumerate(self.entries) if e.key[0] >= index >= 0)
            at = before[-1] if before else next(after, None)
        if at is None:
            return False
        self.cursor = at
        self.following = False
        self.scroll_to(y=self._starts[at], animate=False, immediate=True)
        self.following = self.scroll_y >= self.max_scroll_y and at == len(self.entries) - 1
        self.refresh()
        return True

    def action_page(self, direction: int) -> None:
        height = max(1, self.scrollable_content_region.height - 1)
        self.scroll_to(y=self.scroll_y + direction * height, animate=False, immediate=True)
        i = max(0, bisect_right(self._starts, int(self.scroll_y)) - 1)
        self.cursor = i if direction < 0 else max(i, min(self.cursor, len(self.entries) - 1))
        if direction < 0 and self.scroll_y <= NEAR_EDGE_LINES:
            self.post_message(self.NearTop())
        elif direction > 0 and self.scroll_y >= self.max_scroll_y - NEAR_EDGE_LINES:
            self.post_message(self.NearBottom())
        self.refresh()

    def reveal(self, key: tuple[int, int]) -> None:
        """The cursor on entry ``key``, expanded so a search match in it shows."""
        at = next((i for i, e in enumerate(self.entries) if e.key == key), None)
        if at is None:
            return
        e = self.entries[at]
        if e.foldable and key not in self.expanded:
            self.expanded.add(key)
            self._layout()
        self.cursor = at
        self._show_cursor()

    def search(self, query: str, step: int) -> bool:
        """Move the cursor to the next entry holding ``query`` (``step`` -1: older, +1:
        newer), expanding it so the match shows; False when there is none in what is loaded."""
        self.search_query = query
        hit = find(self.entries, query, self.cursor, step)
        if hit is None:
            self.refresh()
            return False
        self.cursor = hit
        if self.entries[hit].foldable and self.entries[hit].key not in self.expanded:
            self.expanded.add(self.entries[hit].key)
            self._layout()
        self._show_cursor()
        return True
