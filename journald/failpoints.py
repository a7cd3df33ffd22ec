"""Named failpoints for crash and fault tests of the storage layer.

A failpoint is a named place in a write path where a test can make the process die, fail or
stall. They are armed from the environment before the module is imported::

    JOURNALD_FAILPOINTS="after_write_before_fsync=kill@3,mid_seal=raise:ENOSPC,before_write=sleep:20"

Grammar: ``name=action[:arg][@n]`` items separated by ``,`` or ``;``.

* ``kill``        SIGKILL this process (a real crash: no flush, no finally, no atexit)
* ``raise[:ERR]`` raise ``OSError(errno.ERR)``; ``ERR`` is ``ENOSPC`` (default), ``EIO``,
  ``EDQUOT`` or any errno name
* ``sleep:MS``    sleep MS milliseconds (widens a race window)
* ``crash``       raise ``Crash`` (a ``BaseException``): the in-process stand-in for ``kill``,
  for tests that crash a store without killing the test process. No error handler of the
  write path catches it, so nothing after the point runs (no truncate-back, no advance);
  the test then abandons the store and opens the data again, as a restarted daemon would
* ``wait:PATH``   hold here until the file PATH exists (bounded: 120 s), after creating
  ``PATH.reached`` so the test knows the point was reached (a test then acts, e.g. kills a
  NATS node, and creates PATH to let the write go on)
* ``on``          switch on a deliberately wrong variant (the ``bug_*`` points below); ``hit``
  ignores it, the code asks ``is_on``
* ``@n``          fire only on the n-th hit of that point (1-based); without it, every hit

Unarmed they cost nothing: call sites read the module-level boolean ``ARMED`` before any
lookup (``if failpoints.ARMED: failpoints.hit("before_write")``).

Points of the file backend (``journald.storage.file``), fired by its disk seam
(``journald.storage.seam``, ``Disk.step``) where the backend names the step:

``before_write``, ``after_write_before_fsync``, ``after_fsync_before_advance``,
``mid_seal`` (segment linked, manifest not yet written), ``after_seal_manifest`` (manifest
lists the segment, the active file not yet replaced), ``mid_manifest_write`` (any manifest:
temp written and synced, not yet renamed), ``mid_repair`` (torn bytes copied aside, not yet cut),
``mid_prune_stage`` (new volume staged, not committed), ``mid_prune_rename`` (commit
recorded in the manifest, staged volume not yet renamed in), ``after_prune_rename``
(renamed in, old segments and final manifest not yet settled), and the first disk call of
a run's create (``before_run_create``: the run directory not made yet), of a listing
(``before_run_list``) and of a delete (``before_run_delete``: the run not renamed away yet),
where ``raise:ERR`` stands for any errno the disk can answer
(``tests/storage/file/test_file_disk_errors.py``).

Points used by the JetStream backend (``journald.storage.jetstream.journal``): ``before_write``
(nothing of the append published yet) and ``after_fsync_before_advance`` (the server
acknowledged every record, the journal has not advanced); by its object buckets
(``journald.storage.jetstream.objects``): ``js_object_before_meta`` (every chunk of a
checkpoint, mark or attachment acknowledged, its meta message not yet published).

Points of checkpoints (``journald.storage.file.checkpoint_store`` and ``journald.storage.memory``,
``journald.server.checkpoint_service``): ``cp_before_write`` (nothing of it written yet),
``cp_after_temp_write`` (temp file written and synced, not renamed), ``cp_after_rename``
(renamed in, directory not yet synced), ``op_after_checkpoint`` (compaction/restore: the
pre-operation checkpoint is durable, no rebase yet), ``op_after_pages`` (restore, fork,
compaction: the rebase's message pages are stored, the rebase record not yet written),
``op_after_rebase`` (compaction, restore, fork: the rebase is durable, the response not yet
sent). Of a lease end's fold snapshot (``journald.storage.file.checkpoint_store``):
``snapshot_before_write`` (the snapshot's new message pages, page-reference chunks and
answered-id chunks are stored, the snapshot not yet written) and ``snapshot_after_write``
(the snapshot renamed in, the fold marks not yet saved). Of a lease end's view index
(``journald.writer.marks``): ``lease_end_before_view_index`` (the snapshot and fold marks are
saved, the view index not yet extended or saved; ``sleep`` and ``wait`` hold that lease end
on a thread, not the event loop: ``reach``).

Point of the daemon's threads (``journald.storage.io_pool``): ``background_call`` (a
blocking call of the background class, a read or a lease close, is about to run on a read
thread; ``wait:PATH`` holds every read thread there).

Deliberately wrong variants (``=on``), which exist only to prove that the tests catch them:

``bug_ack_before_fsync`` the file journal acknowledges a group (and advances ``last_seq``)
without waiting for its write and fdatasync to succeed: a write that fails there (a crash
before the data reached the disk) loses acknowledged records. It is a seam
(``journald.storage.seam.AckBeforeFsync``), which a file store built while it is on uses;
the production write path has no branch for it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import threading
import time
from dataclasses import dataclass

ENV = "JOURNALD_FAILPOINTS"
POINTS = (
    "before_write",
    "after_write_before_fsync",
    "after_fsync_before_advance",
    "mid_seal",
    "after_seal_manifest",
    "mid_manifest_write",
    "mid_repair",
    "mid_prune_stage",
    "mid_prune_rename",
    "after_prune_rename",
    "before_run_create",
    "before_run_list",
    "before_run_delete",
    "js_object_before_meta",
    "cp_before_write",
    "cp_after_temp_write",
    "cp_after_rename",
    "op_after_checkpoint",
    "op_after_pages",
    "op_after_rebase",
    "snapshot_before_write",
    "snapshot_after_write",
    "lease_end_before_view_index",
    "bug_ack_before_fsync",
    "background_call",
)
ACTIONS = ("kill", "raise", "sleep", "crash", "wait", "on")
WAIT_LIMIT_S = 120.0


class Crash(BaseException):
    """A simulated process death at a failpoint (action ``crash``).

    A ``BaseException`` so that the storage code's ``except Exception``/``except OSError``
    handlers let it through, as they would never run after a real ``kill``."""


@dataclass(slots=True)
class _Point:
    action: str
    arg: str
    nth: int
    hits: int = 0


ARMED = False
_points: dict[str, _Point] = {}
_lock = threading.Lock()


def parse(spec: str) -> dict[str, _Point]:
    out: dict[str, _Point] = {}
    for item in spec.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, action = item.partition("=")
        name = name.strip()
        if not sep or name not in POINTS:
            raise ValueError(
                f"{ENV}: bad item {item!r}; use name=action with name one of {', '.join(POINTS)}"
            )
        nth = 0
        if "@" in action:
            action, _, n = action.partition("@")
            nth = int(n)
        act, _, arg = action.partition(":")
        if act not in ACTIONS:
            raise ValueError(f"{ENV}: unknown action {act!r} in {item!r} ({', '.join(ACTIONS)})")
        if act == "raise" and arg and not hasattr(errno, arg):
            raise ValueError(f"{ENV}: unknown errno name {arg!r} in {item!r}")
        if act == "sleep":
            float(arg)
        if act == "wait" and not arg:
            raise ValueError(f"{ENV}: wait needs a file path (name=wait:PATH) in {item!r}")
        out[name] = _Point(act, arg, nth)
    return out


def arm(spec: str) -> None:
    """Arm failpoints in this process (replaces any armed set); ``""`` disarms."""
    global ARMED
    with _lock:
        _points.clear()
        _points.update(parse(spec))
        ARMED = bool(_points)


def disarm() -> None:
    arm("")


def is_on(name: str) -> bool:
    """Whether the wrong variant ``name`` is switched on (call only behind ``ARMED``)."""
    with _lock:
        point = _points.get(name)
        return point is not None and point.action == "on"


def blocks(name: str) -> bool:
    """Whether ``name`` is armed to hold its caller (``sleep``, ``wait``): a step made on the
    event loop (a group write whose fdatasync goes through AIO) fires such a point on a
    thread, so that it holds that write and not every call (call only behind ``ARMED``)."""
    with _lock:
        point = _points.get(name)
        return point is not None and point.action in ("sleep", "wait")


def hit(name: str) -> None:
    """Fire ``name`` if it is armed (call only behind ``if failpoints.ARMED``)."""
    with _lock:
        point = _points.get(name)
        if point is None or point.action == "on":
            return
        point.hits += 1
        if point.nth and point.hits != point.nth:
            return
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # pragma: no cover - SIGKILL is not deliverable late
    elif point.action == "raise":
        code = getattr(errno, point.arg or "ENOSPC")
        raise OSError(code, f"failpoint {name}: {os.strerror(code)}")
    elif point.action == "crash":
        raise Crash(f"failpoint {name}: simulated crash")
    elif point.action == "wait":
        _wait_for_release(point.arg)
    else:
        time.sleep(float(point.arg) / 1000.0)


async def reach(name: str) -> None:
    """``hit`` from a coroutine (call only behind ``ARMED``): a ``sleep`` or ``wait`` holds
    the caller on a thread of the default executor, not the event loop, so the daemon goes
    on serving (and shutting down) around it."""
    if blocks(name):
        await asyncio.to_thread(hit, name)
    else:
        hit(name)


def _wait_for_release(path: str) -> None:
    with open(path + ".reached", "w"):
        pass
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


arm(os.environ.get(ENV, ""))
