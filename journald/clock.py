"""UTC timestamps in the record format (RFC 3339, microseconds, ``Z``)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_ts(dt: datetime | None = None) -> str:
    dt = (dt or datetime.now(UTC)).astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
