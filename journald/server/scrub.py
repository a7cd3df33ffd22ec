"""The background scrubber: every run verified at an I/O budget, what it finds kept and used
(docs/design.md#scrubbing).

An ``Open`` or a dormant read trusts the run's fold snapshot and a stat of its sealed segments
(docs/design.md#fold-snapshots), so a byte that rots inside a sealed segment without any write
to it is seen only by what reads every record. The scrubber does that, in the background:

* a **pass** lists the runs and verifies each with the walk ``journald verify`` makes, reading
  at ``--scrub-bytes-per-s``; a pass starts ``--scrub-interval-s`` after the last one ended
  (the first a minute after start-up, or sooner for a shorter interval), and ``0`` for
  either disables it. On the file backend the walk runs
  in a child process at the lowest CPU priority (``journald.storage.file.scrub``); on the
  memory and JetStream backends it is the store's own ``verify``, in the daemon, followed by a
  pause as long as reading the run's bytes at the budget would take;
* the walk includes every message page the run's rebases reference (present, hashing to its
  name: docs/design.md#message-pages), as ``Verify`` checks them;
* a **finding** (the ``store_corrupted`` the walk raised) is kept beside the run (the
  checkpoint store's ``scrub`` index part, so it survives a restart) and in memory: ``List``
  shows the run as ``corrupted`` with the finding in ``error``, and the next ``Open`` or
  dormant read (``Fold``, ``History``) refuses with it. A finding holds a key of the run's
  files (``file.scrub.run_key``; elsewhere the run's listing figures) and applies only while
  they still have it: a recovery, a restore from a backup or a seal since makes it stale, and
  the next pass decides again. A pass that finds the run healthy removes it. Only the
  scrubber writes findings: a client's read never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from journald.clock import utc_ts
from journald.core.errors import JournaldError, SessionNotFound, StoreCorrupted
from journald.storage.base import RunInfo, Store
from journald.storage.checkpoint_base import SCRUB, CheckpointStore
from journald.storage.file.scrub import run_key
from journald.storage.file.store import FileStore
from journald.storage.info import CORRUPTED
from journald.storage.pages import PageStore

log = logging.getLogger(__name__)
MiB = 1024 * 1024
DEFAULT_SCRUB_BYTES_PER_S = 2 * MiB
DEFAULT_SCRUB_INTERVAL_S = 3600.0
FIRST_PASS_DELAY_S = 60.0


@dataclass(frozen=True, slots=True)
class Finding:
    """Damage the scrubber found in a run, and the key of the files it found it in."""

    run_id: str
    at: str
    message: str
    metadata: dict[str, str]
    key: list[Any]

    def error(self) -> StoreCorrupted:
        return StoreCorrupted(
            f"{self.message} (found by the background scrubber at {self.at}; the run is "
            f"neither served nor opened until it is recovered or restored; `journald verify "
            f"{self.run_id}` checks it again)",
            metadata={**self.metadata, "run_id": self.run_id, "found_by": "scrub"},
        )

    def doc(self) -> dict[str, Any]:
        return {"finding": dataclasses.asdict(self)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> Finding | None:
        f = doc.get("finding") if doc else None
        if not isinstance(f, dict):
            return None
        try:
            return cls(
                str(f["run_id"]),
                str(f["at"]),
                str(f["message"]),
                {str(k): str(v) for k, v in dict(f["metadata"]).items()},
                list(f["key"]),
            )
        except (KeyError, TypeError, ValueError):
            return None  # not a finding this code wrote: the next pass writes one again


class ScrubRecords:
    """The findings of every run: beside each run (the truth after a restart) and in memory
    once ``load`` has read them (``List`` reads only memory)."""

    def __init__(self, store: Store, checkpoints: CheckpointStore) -> None:
        self.store = store
        self.checkpoints = checkpoints
        self.damaged: dict[str, Finding] = {}
        self.loaded = False
        self.on_change: Callable[[str], None] = lambda run_id: None
        """Told a run whose listed status the scrubber changed (ListChanges)."""

    async def key_of(self, run_id: str) -> list[Any]:
        if isinstance(self.store, FileStore):
            return await asyncio.to_thread(run_key, self.store.run_dir(run_id))
        try:
            i = await self.store.info(run_id)
        except StoreCorrupted:
            return ["unreadable"]
        return [i.created, i.updated, i.last_seq, i.record_count, i.bytes]

    async def load(self, run_ids: Iterable[str]) -> None:
        for run_id in run_ids:
            f = Finding.from_doc(await self.checkpoints.load_mark(run_id, SCRUB))
            if f is not None:
                self.damaged[run_id] = f
        self.loaded = True

    async def _finding(self, run_id: str) -> Finding | None:
        if self.loaded:
            return self.damaged.get(run_id)
        return Finding.from_doc(await self.checkpoints.load_mark(run_id, SCRUB))

    async def found(self, run_id: str, finding: Finding | None) -> None:
        """The scrubber's result for a run: its damage, or None (healthy)."""
        had = await self._finding(run_id)
        if (had is None) != (finding is None):
            self.on_change(run_id)  # its listed status becomes or stops being "corrupted"
        if finding is None:
            self.damaged.pop(run_id, None)
            if had is not None:
                await self.checkpoints.save_mark(run_id, {"finding": None}, SCRUB)
                log.warning("scrub: run %s verifies again; its finding is cleared", run_id)
            return
        self.damaged[run_id] = finding
        if had is None or (had.message, had.key) != (finding.message, finding.key):
            await self.checkpoints.save_mark(run_id, finding.doc(), SCRUB)
            log.error(
                "scrub: run %s is damaged: %s. List shows it as corrupted and Open refuses it; "
                "quarantine the damage with `journald recover %s` or restore it from a backup",
                run_id,
                finding.message,
                run_id,
            )

    async def forget(self, run_id: str, deleted: bool = False) -> None:
        """A recovery or deletion (``deleted``: its index went with it): what was found no
        longer describes the run."""
        if (self.damaged.pop(run_id, None) is not None or not self.loaded) and not deleted:
            with contextlib.suppress(JournaldError):
                await self.checkpoints.save_mark(run_id, {"finding": None}, SCRUB)

    async def current(self, run_id: str) -> Finding | None:
        """The run's finding while its files are still those it was found in."""
        f = await self._finding(run_id)
        if f is None:
            return None
        try:
            if await self.key_of(run_id) == f.key:
                return f
        except (OSError, JournaldError):
            return f
        log.debug("scrub: run %s changed since its finding; the next pass decides", run_id)
        return None

    async def refuse_if_damaged(self, run_id: str) -> None:
        """Refuse an Open or a dormant read of a run the scrubber found damaged."""
        f = await self.current(run_id)
        if f is not None:
            raise f.error()

    async def listed(self, infos: list[RunInfo]) -> list[RunInfo]:
        """The listing with the runs the scrubber found damaged shown as ``corrupted``."""
        out = []
        for i in infos:
            f = self.damaged.get(i.run_id) if i.status != CORRUPTED else None
            if f is not None and await self.current(i.run_id) is not None:
                i = dataclasses.replace(i, status=CORRUPTED, error=f.error().message)
            out.append(i)
        return out


@dataclass(slots=True)
class PassReport:
    runs: int = 0
    damaged: int = 0
    bytes_read: int = 0
    seconds: float = 0.0


class Scrubber:
    """Passes over every run of ``store`` (see the module doc); ``run`` until cancelled."""

    def __init__(
        self,
        store: Store,
        records: ScrubRecords,
        bytes_per_s: int,
        interval_s: float,
        pages: PageStore | None = None,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        self.store = store
        self.pages = pages
        """Checks the message pages of each run's rebases (the file child reads them itself)."""
        self.checkpoints = checkpoints
        """Where the fold snapshots are: the answered-id chunks they reference are checked."""
        self.records = records
        self.bytes_per_s = bytes_per_s
        self.interval_s = interval_s
        self.passes = 0
        self.last: PassReport | None = None

    @property
    def enabled(self) -> bool:
        return self.bytes_per_s > 0 and self.interval_s > 0

    async def run(self) -> None:
        try:
            await self.records.load(i.run_id for i in await self.store.list())
        except (OSError, JournaldError) as exc:  # the findings are read again per Open
            log.warning("scrub: could not read the runs' findings (%s)", exc)
        if not self.enabled:
            return
        # the first pass waits a little: a daemon's start is when its clients open runs again
        await asyncio.sleep(min(self.interval_s, FIRST_PASS_DELAY_S))
        while True:
            try:
                self.last = await self.pass_once()
                self.passes += 1
                r = self.last
                log.info(
                    "scrub: pass %d verified %d runs (%d bytes) in %.1f s; %d damaged",
                    self.passes,
                    r.runs,
                    r.bytes_read,
                    r.seconds,
                    r.damaged,
                )
            except (OSError, JournaldError) as exc:
                log.warning("scrub: the pass stopped (%s); the next one starts as planned", exc)
            await asyncio.sleep(self.interval_s)

    async def pass_once(self) -> PassReport:
        started = time.monotonic()
        report = PassReport()
        if isinstance(self.store, FileStore):
            await self._pass_in_child(self.store, report)
        else:
            await self._pass_inline([i.run_id for i in await self.store.list()], report)
        report.seconds = time.monotonic() - started
        return report

    async def _record(self, result: dict[str, Any], report: PassReport) -> None:
        run_id = str(result["run_id"])
        if result.get("gone"):
            self.records.damaged.pop(run_id, None)
            return
        if "skipped" in result:
            log.debug("scrub: run %s skipped this pass: %s", run_id, result["skipped"])
            return
        report.runs += 1
        report.bytes_read += int(result.get("bytes", 0))
        if result.get("ok"):
            await self.records.found(run_id, None)
            return
        report.damaged += 1
        meta = {str(k): str(v) for k, v in dict(result.get("metadata") or {}).items()}
        f = Finding(run_id, utc_ts(), str(result["message"]), meta, list(result["key"]))
        await self.records.found(run_id, f)

    async def _pass_in_child(self, store: FileStore, report: PassReport) -> None:
        """The pass as a child process (it lists the runs itself), its results as they come."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        argv = [sys.executable, "-m", "journald.storage.file.scrub", store.data_dir]
        # spawned by subprocess from a thread, which vforks: the event loop's own spawn forks,
        # and a fork runs gRPC's fork handlers (they log, and wait for gRPC's threads)
        proc = await asyncio.to_thread(
            subprocess.Popen,
            [*argv, str(self.bytes_per_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )

        def pump() -> None:
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    loop.call_soon_threadsafe(lines.put_nowait, line)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                    loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=pump, name="journald-scrub-results", daemon=True).start()
        try:
            while (line := await lines.get()) is not None:
                await self._record(json.loads(line), report)
            code = await asyncio.to_thread(proc.wait)
            if code != 0:
                log.warning("scrub: the scrub process exited with %s", code)
        finally:
            if proc.poll() is None:  # cancelled (shutdown): stop the child we started
                proc.kill()
                await asyncio.to_thread(proc.wait)

    async def _pass_inline(self, ids: list[str], report: PassReport) -> None:
        for run_id in ids:
            try:
                key = await self.records.key_of(run_id)
                info_bytes = (await self.store.info(run_id)).bytes
            except SessionNotFound:
                continue
            except StoreCorrupted:
                info_bytes = 0
            result: dict[str, Any] = {"run_id": run_id, "bytes": info_bytes, "key": key}
            try:
                await self.store.verify(run_id)
                if self.pages is not None:  # a page missing or damaged: as Verify says it
                    await self.pages.check_run(self.store, run_id, self.checkpoints)
                result["ok"] = True
            except SessionNotFound:
                result = {"run_id": run_id, "gone": True}
            except StoreCorrupted as exc:
                result.update(ok=False, message=exc.message, metadata=exc.metadata)
            await self._record(result, report)
            await asyncio.sleep(info_bytes / self.bytes_per_s)
