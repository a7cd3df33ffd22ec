"""What every viewer screen shares: running daemon calls off the UI thread, and the typed
errors they raise turned into the right screen or notice."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from journald_client import DaemonUnavailable, JournaldError, NotFoundError
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input

if TYPE_CHECKING:
    from journald.view.app import ViewerApp
    from journald.view.data import Source

T = TypeVar("T")


def describe_error(err: JournaldError) -> str:
    """The daemon's sentence with its code, for a notice."""
    return f"{err.code}: {err.message}" if err.code else err.message


class DaemonScreen(Screen[None]):
    """A screen whose data comes from the daemon (through ``self.source``)."""

    @property
    def viewer(self) -> ViewerApp:
        from journald.view.app import ViewerApp

        assert isinstance(self.app, ViewerApp)
        return self.app

    @property
    def source(self) -> Source:
        return self.viewer.source

    def fetch(
        self,
        call: Callable[[], T],
        done: Callable[[T], None],
        *,
        group: str = "fetch",
        exclusive: bool = False,
        failed: Callable[[JournaldError], None] | None = None,
    ) -> None:
        """Run ``call`` in a worker thread, then ``done(result)`` on the UI thread. No daemon:
        the app shows its "not running" screen; another typed error: ``failed`` (default: a
        notice with the daemon's sentence)."""
        app = self.viewer

        def job() -> None:
            try:
                value = call()
            except DaemonUnavailable:
                self._back(app.daemon_lost)
                return
            except JournaldError as err:
                self._back(failed or self.show_error, err)
                return
            self._back(done, value)

        self.run_worker(job, thread=True, group=group, exclusive=exclusive, exit_on_error=False)

    def _back(self, fn: Callable[..., object], *args: object) -> None:
        # the app may be closing while a worker finishes: nothing left to update then
        with contextlib.suppress(RuntimeError):
            self.app.call_from_thread(fn, *args)

    def show_error(self, err: JournaldError) -> None:
        if isinstance(err, NotFoundError):
            self.notify(
                f"{err.message} (it may have been deleted)", severity="warning", markup=False
            )
        else:
            self.notify(describe_error(err), severity="error", timeout=8, markup=False)

    def reconnected(self) -> None:
        """The daemon answers again: reload what this screen shows."""


class Box(Input):
    """A one-line prompt at the bottom (search, go to); escape closes it and leaves the
    transcript where it was."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", show=False)]

    def action_close(self) -> None:
        self.remove_class("shown")
        for main in self.screen.query("TranscriptView, DataTable").results():
            main.focus()  # what the screen shows: the transcript, or the records table
            break
