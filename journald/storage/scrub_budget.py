"""The scrubber's I/O budget: reads paced to a number of bytes per second.

The background scrubber (docs/design.md#scrubbing) reads every run at a rate an operator sets
(``journald serve --scrub-bytes-per-s``) so that it never competes with appends for the disk:
files are read in small chunks and the reader sleeps between them for as long as the bytes it
read are ahead of the rate. Pure pacing, no I/O of its own beyond the reads it paces.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CHUNK_BYTES = 64 * 1024
"""One read of the scrubber: small, so an append's write never queues behind a long one."""
BURST_S = 0.05
"""Reads may run this far ahead of the rate before the reader sleeps."""


class ReadBudget:
    """Reads that, over time, stay under ``bytes_per_s`` (0: no limit)."""

    def __init__(
        self,
        bytes_per_s: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_s = bytes_per_s
        self.bytes_read = 0
        self.slept_s = 0.0
        self._clock = clock
        self._sleep = sleep
        self._due = clock()  # when the bytes read so far are paid for

    def spend(self, n: int) -> None:
        """Account ``n`` bytes read; sleep while the reads are ahead of the rate."""
        self.bytes_read += n
        if self.bytes_per_s <= 0 or n <= 0:
            return
        now = self._clock()
        self._due = max(self._due, now - BURST_S) + n / self.bytes_per_s
        ahead = self._due - now
        if ahead > 0:
            self._sleep(ahead)
            self.slept_s += ahead

    def read_file(self, path: str) -> bytes:
        """The whole file, read ``CHUNK_BYTES`` at a time at the budget's pace."""
        parts = []
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                parts.append(chunk)
                self.spend(len(chunk))
        return b"".join(parts)
