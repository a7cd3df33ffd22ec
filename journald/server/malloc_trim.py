"""Giving memory back to the system after large messages (glibc only; elsewhere a no-op).

A request or response near the message cap is one allocation of up to 16 MiB (plus the
parsed message). glibc serves allocations above its mmap threshold with their own mapping,
returned on free, but it raises that threshold to the size of every such block freed (up to
32 MiB), so after the first large message the next ones come from the heap arenas, and the
arenas keep freed memory. A daemon that refused a thousand large requests then held hundreds
of MiB it no longer used. So the daemon pins the threshold (``pin_mmap_threshold``) and,
after a large message, or after many leases have ended, trims the arenas once the call is
over (``Trimmer``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger("journald.daemon")

MMAP_THRESHOLD_BYTES = 1024 * 1024
"""Allocations from this size on get their own mapping, unmapped when freed."""
LARGE_MESSAGE_BYTES = 1024 * 1024
"""A message from this size on asks for a trim once the call is over."""
TRIM_EVERY_S = 1.0
LEASES_ENDED_PER_TRIM = 256
"""Leases closed that ask for a trim: a client with thousands of leases that dies (or ends
them) frees each one's journal, writer and stream in pieces the arenas keep (measured in
docs/benchmarks.md#memory: 9,800 ended leases left ~200 MB that a trim gives back)."""
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (glibc malloc.h)


def _glibc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None  # not glibc (musl, macOS): nothing to tune
    return libc


_LIBC = _glibc()


def pin_mmap_threshold(size_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold (which also stops it from rising); False when not glibc."""
    return _LIBC is not None and _LIBC.mallopt(_M_MMAP_THRESHOLD, size_bytes) == 1


class Trimmer:
    """``note`` a message's size; a large one gets the arenas trimmed at the next two ticks
    of ``every_s`` (the second for a call still holding its message at the first), on a
    worker thread: a trim walks every arena."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s = every_s
        self.pending = 0
        self.trims = 0
        self.leases_ended = 0
        """Leases closed since the last trim they asked for."""

    def note(self, size_bytes: int) -> None:
        if size_bytes >= LARGE_MESSAGE_BYTES:
            self.pending = 2

    def lease_closed(self) -> None:
        """A lease's journal is closed; every ``LEASES_ENDED_PER_TRIM`` of them ask for a
        trim (a mass end trims about once a tick while it lasts, a lone one never)."""
        self.leases_ended += 1
        if self.leases_ended >= LEASES_ENDED_PER_TRIM:
            self.leases_ended = 0
            self.pending = 2

    async def run(self) -> None:
        """Until cancelled."""
        if _LIBC is None:
            return
        while True:
            await asyncio.sleep(self.every_s)
            if self.pending:
                self.pending -= 1
                await asyncio.to_thread(_LIBC.malloc_trim, 0)
                self.trims += 1
