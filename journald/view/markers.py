"""What a compaction or restore marker in a transcript offers: fork a new run from the
checkpoint taken before that rebase, or restore it, each after the same confirmation the
details screen asks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journald_client import RestoreResult

from journald.view.details import Ask, Confirm

if TYPE_CHECKING:
    from journald.view.transcript_screen import TranscriptScreen


def fork_from(screen: TranscriptScreen, checkpoint_id: str) -> None:
    """Ask, then fork a new run from ``checkpoint_id`` and open its transcript."""
    ask = Ask(
        "Fork a new run from before this rebase?",
        f"A new run starts from checkpoint {checkpoint_id} of {screen.run_id} (the "
        "conversation before the marker); this run is untouched.",
        "Fork",
        field="new run id (empty: the daemon picks one)",
    )

    def answered(new_id: str | None) -> None:
        if new_id is None:
            return

        def done(run_id: str) -> None:
            screen.viewer.last_fork = run_id
            screen.notify(f"forked run {run_id}; it opens now", markup=False)
            screen.viewer.open_transcript(run_id)

        screen.fetch(lambda: screen.source.fork(screen.run_id, checkpoint_id, new_id), done)

    screen.app.push_screen(Confirm(ask), answered)


def restore_to(screen: TranscriptScreen, checkpoint_id: str) -> None:
    """Ask, then restore ``checkpoint_id`` (the transcript reloads on the rebase record)."""
    ask = Ask(
        "Restore the conversation from before this rebase?",
        f"Run {screen.run_id} goes back to checkpoint {checkpoint_id}. The current "
        "conversation is kept first in a pre_restore checkpoint; the journal only grows (a "
        "rebase record).",
        "Restore",
    )

    def answered(value: str | None) -> None:
        if value is None:
            return

        def done(r: RestoreResult) -> None:
            screen.notify(f"restored: {r.to_messages} messages", markup=False)

        screen.fetch(lambda: screen.source.restore(screen.run_id, checkpoint_id), done)

    screen.app.push_screen(Confirm(ask), answered)
