"""The daemon's wall clock: UTC timestamps in the record format (RFC 3339, microseconds,
``Z``) and milliseconds for time-ordered ids.

One timestamp form for the daemon and the Python client: both stamp records with
``journald_proto.conventions``, so a record stamped on either side reads the same.

Tests step the clock with ``JOURNALD_TEST_CLOCK_OFFSET_S`` (seconds, may be negative), read
once at start: every timestamp and id of the process is that far off the real clock, as if
the host's clock had been set so. It exists for tests of clock steps
(``tests/integration/checkpoints/test_clock_steps.py``); a deployed daemon never sets it.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from journald_proto.conventions import format_ts, now_ts

OFFSET_ENV = "JOURNALD_TEST_CLOCK_OFFSET_S"
_offset_s = float(os.environ.get(OFFSET_ENV, "") or 0.0)

__all__ = ["OFFSET_ENV", "utc_ts", "wall_ms"]


def utc_ts() -> str:
    """Now, as a record timestamp."""
    if not _offset_s:
        return now_ts()
    return format_ts(datetime.now(UTC) + timedelta(seconds=_offset_s))


def wall_ms() -> int:
    """Now, in milliseconds since the epoch (the time part of a ULID)."""
    return int((time.time() + _offset_s) * 1000)
