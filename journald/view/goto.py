"""What the transcript's "go to" prompt (``:``) understands, as a pure parse.

* ``1200`` or ``m 1200``: message 1200 (1 is the first);
* ``s 4711`` or ``seq 4711``: the message record 4711 folded into;
* ``t 14:03`` (today in the local zone, yesterday when that is still to come), ``t 3m ago``
  (``s``, ``m``, ``h``, ``d``), ``t 2026-11-30 14:03``, ``t 2026-11-30T12:03:00Z``: the
  message of the first record at or after that time.

Seq and time are resolved by the daemon (History ``at_seq``/``at_time``), one page each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

HELP = "N (message), s N (seq), t 14:03 / t 3m ago / t 2026-11-30T12:03Z (time)"
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])(?:\s+ago)?$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # "message", "seq" or "time"
    number: int = 0  # message (1-based) or seq
    when: str = ""  # RFC 3339 in UTC, for "time"
    said: str = ""  # the time as the reader will read it back (local, with the zone)


class NotATarget(ValueError):
    """The prompt's text says no place; the message says what would."""


def _number(text: str, what: str) -> int:
    try:
        n = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise NotATarget(f"not a {what}: {text!r} ({HELP})") from None
    if n < 1:
        raise NotATarget(f"{what}s start at 1, not {n}")
    return n


def parse_time(text: str, now: datetime) -> datetime:
    """A time the reader typed, as an aware datetime; ``now`` is aware (its zone is the
    reader's)."""
    t = text.strip().lower()
    if t == "now":
        return now
    m = _AGO.match(t)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNITS_S[m.group(2)])
    m = _CLOCK.match(t)
    if m:
        h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if h > 23 or mi > 59 or s > 59:
            raise NotATarget(f"not a time of day: {text!r}")
        at = now.replace(hour=h, minute=mi, second=s, microsecond=0)
        return at - timedelta(days=1) if at > now else at
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise NotATarget(f"not a time: {text!r} ({HELP})") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=now.tzinfo)


def parse(text: str, now: datetime | None = None) -> Target:
    """The place ``text`` names (``NotATarget`` with what would do)."""
    t = text.strip()
    head, _, rest = t.partition(" ")
    word = head.lower()
    if word in ("m", "msg", "message"):
        return Target("message", _number(rest.strip(), "message number"))
    if word in ("s", "seq"):
        return Target("seq", _number(rest.strip(), "seq"))
    if word in ("t", "time", "at"):
        when = parse_time(rest, now or datetime.now(UTC).astimezone())
        said = when.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        return Target(
            "time", when=when.astimezone(UTC).isoformat().replace("+00:00", "Z"), said=said
        )
    return Target("message", _number(t, "message number"))
