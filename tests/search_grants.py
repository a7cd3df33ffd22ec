"""Search permission (o+x) on directories, granted for as long as any test anywhere needs it.

Tests that run a second uid need every directory above the checkout and the interpreter to let
others pass. Granting and taking back per test raced: another xdist worker, or another suite
on the same machine (its clone elsewhere, the same interpreter under /root), had its grant
taken back while its second uid was still importing (``No module named 'asyncio'``). So a
grant is counted: a state file, changed only under an exclusive ``flock``, records each
directory's first mode and the pids that need it; the mode goes back when the last live
holder lets go (a holder that died is dropped the next time the state is read).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

STATE = Path(tempfile.gettempdir()) / "journald-test-search-grants.json"
LOCK = STATE.with_suffix(".lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _state() -> Iterator[dict[str, dict[str, object]]]:
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state: dict[str, dict[str, object]] = {}
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(STATE.read_text())
            for entry in state.values():
                entry["holders"] = [p for p in entry["holders"] if _alive(p)]  # type: ignore[attr-defined]
            yield state
            for d, entry in list(state.items()):
                if not entry["holders"]:
                    with contextlib.suppress(OSError):
                        os.chmod(d, int(entry["mode"]))  # type: ignore[call-overload]
                    del state[d]
            STATE.write_text(json.dumps(state))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def searchable(paths: Iterable[Path]) -> Iterator[None]:
    """Every directory from each of ``paths`` up to ``/`` lets others pass while this lasts."""
    dirs = sorted({str(d) for p in paths for d in [p, *p.parents]})
    me = os.getpid()
    with _state() as state:
        for d in dirs:
            mode = os.stat(d).st_mode
            if d in state:
                state[d]["holders"].append(me)  # type: ignore[attr-defined]
            elif not mode & stat.S_IXOTH:
                os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)
                state[d] = {"mode": stat.S_IMODE(mode), "holders": [me]}
    try:
        yield
    finally:
        with _state() as state:
            for d in dirs:
                if d in state:
                    holders = state[d]["holders"]
                    if me in holders:  # type: ignore[operator]
                        holders.remove(me)  # type: ignore[attr-defined]
