"""``journald view``: the full-screen viewer app, and the screen shown while no daemon answers.

Screens: runs (the table) -> transcript of a run -> details of a run. Losing the daemon
(a call finds no socket, a Watch breaks) covers everything with the "not running" screen,
which polls the socket with a capped backoff; when the daemon answers again the screen goes
away and every screen under it reloads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from journald_client.paths import default_socket_path
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Center, Middle
from textual.screen import Screen
from textual.widgets import Footer, Static

from journald.view.base import DaemonScreen
from journald.view.data import Source
from journald.view.details import DetailsScreen
from journald.view.help import HelpScreen
from journald.view.runs import RunsScreen
from journald.view.transcript_screen import TranscriptScreen

RETRY_FIRST_S = 0.25
RETRY_CAP_S = 5.0
THEMES = {"dark": "textual-dark", "light": "textual-light"}


def retry_delays(first_s: float = RETRY_FIRST_S, cap_s: float = RETRY_CAP_S) -> list[float]:
    """The waits between reconnect attempts: doubling from ``first_s``, then ``cap_s``."""
    out, d = [], first_s
    while d < cap_s:
        out.append(d)
        d *= 2
    return [*out, cap_s]


class NotRunningScreen(Screen[None]):
    """No daemon answers: say how to start one, and reconnect when it is back."""

    DEFAULT_CSS = """
    NotRunningScreen { align: center middle; }
    NotRunningScreen #box {
        width: 72; max-width: 100%; height: auto; padding: 1 2;
        border: heavy $error; background: $surface;
    }
    NotRunningScreen #retry { color: $text-muted; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("r", "retry", "Retry now")]

    def __init__(self, socket_path: str) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.attempts = 0
        self.stopped = False
        self.wake = threading.Event()
        self.retry_text = ""

    def compose(self) -> ComposeResult:
        serve = "journald serve"
        if self.socket_path != default_socket_path().removeprefix("unix:"):
            serve += f" --socket {self.socket_path}"
        text = (
            "[b]The journald daemon is not running[/b]\n\n"
            f"Nothing answers at [b]{_escape(self.socket_path)}[/b].\n\n"
            "Start it in another terminal:\n\n"
            "  [b]make run[/b]   (from the repository, on the default socket)\n"
            f"  [b]{_escape(serve)}[/b]\n\n"
            "or point the viewer at another socket:\n"
            "  journald view --socket PATH   (or set JOURNALD_SOCKET)"
        )
        with Middle(), Center():
            yield Static(text, id="box")
        yield Static("", id="retry")
        yield Footer()

    def on_mount(self) -> None:
        app = self.app
        assert isinstance(app, ViewerApp)
        source = app.source
        delays = retry_delays(app.retry_first_s, app.retry_cap_s)

        def poll() -> None:
            while not self.stopped:
                self.attempts += 1
                if source.ping():
                    with contextlib.suppress(RuntimeError):
                        app.call_from_thread(app.reconnected)
                    return
                wait = delays[min(self.attempts - 1, len(delays) - 1)]
                with contextlib.suppress(RuntimeError):
                    app.call_from_thread(self._tell, wait)
                self.wake.wait(wait)  # the backoff; r or leaving the screen cuts it short
                self.wake.clear()

        self.run_worker(poll, thread=True, group="reconnect", exit_on_error=False)

    def _tell(self, wait: float) -> None:
        self.retry_text = f"attempt {self.attempts} failed; trying again in {wait:g}s (r: now)"
        self.query_one("#retry", Static).update(self.retry_text)

    def action_retry(self) -> None:
        self.wake.set()

    def on_unmount(self) -> None:
        self.stopped = True
        self.wake.set()


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


class ViewerApp(App[None]):
    """``ViewerApp(Source(socket), run_id)``: starts on the runs table, or on the run."""

    TITLE = "journald view"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys"),
        Binding("t", "toggle_theme", "Light/dark", show=False),
    ]

    def __init__(
        self,
        source: Source,
        run_id: str | None = None,
        *,
        theme: str = "dark",
        retry_first_s: float = RETRY_FIRST_S,
        retry_cap_s: float = RETRY_CAP_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.clock = clock  # what "3m ago" is measured from (the snapshots fix it)
        self.source = source
        self.start_run = run_id
        self.theme_name = THEMES.get(theme, theme)
        self.retry_first_s = retry_first_s
        self.retry_cap_s = retry_cap_s
        self.offline = False
        self.last_fork = ""  # the run this viewer forked last (o on the runs table opens it)

    def on_mount(self) -> None:
        self.theme = self.theme_name
        self.push_screen(RunsScreen())
        if self.start_run:
            self.push_screen(TranscriptScreen(self.start_run))

    def on_unmount(self) -> None:
        self.source.close()

    # --- connection --------------------------------------------------------------------

    def daemon_lost(self) -> None:
        if self.offline:
            return
        self.offline = True
        self.push_screen(NotRunningScreen(self.source.socket_path))

    def reconnected(self) -> None:
        if not self.offline:
            return
        self.offline = False
        if isinstance(self.screen, NotRunningScreen):
            self.pop_screen()
        for screen in self.screen_stack:
            if isinstance(screen, DaemonScreen):
                screen.reconnected()
        self.notify("reconnected to the journald daemon")

    # --- navigation --------------------------------------------------------------------

    def open_transcript(self, run_id: str) -> None:
        self.push_screen(TranscriptScreen(run_id))

    def open_details(self, run_id: str) -> None:
        self.push_screen(DetailsScreen(run_id))

    def pop_to_runs(self) -> None:
        while len(self.screen_stack) > 2 and not isinstance(self.screen, RunsScreen):
            self.pop_screen()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme != "textual-light" else "textual-dark"


def run_viewer(socket: str | None, run_id: str | None, theme: str = "dark") -> int:
    ViewerApp(Source(socket), run_id, theme=theme).run()
    return 0
