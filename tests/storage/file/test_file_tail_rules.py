"""Properties of ``segments.tail_end``, the rule that tells a torn write from damage.

Over acknowledged lines (any records, framed as the store writes them):
* what a crash leaves after them (any strict prefix of the next line, or zero-filled sectors
  from them, possibly followed by a sector that did reach the disk) is cut, and only that;
* no change of one byte to them, to any value, is ever cut: the walk gets every byte and
  reports the damage.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from journald.core.records import Record
from journald.storage.file.segments import SECTOR, frame, tail_end
from tests.builders import JournalBuilder, text, user_payload

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=120)


@st.composite
def acked_and_next(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(the acknowledged lines, the next line, never acknowledged)."""
    b = JournalBuilder("prop-run", prompt=draw(texts))
    for t in draw(st.lists(texts, min_size=0, max_size=6)):
        b.add("user", user_payload(t))
    nxt: Record = b.add("user", {"content": [text(draw(texts))]})
    acked = b"".join(frame(r) for r in b.records[:-1])
    return acked, frame(nxt)


@settings(max_examples=300, deadline=None)
@given(acked_and_next(), st.data())
def test_what_a_kill_leaves_after_the_last_acknowledged_line_is_cut(
    case: tuple[bytes, bytes], data: st.DataObject
) -> None:
    acked, nxt = case
    cut = data.draw(st.integers(1, len(nxt) - 1))
    assert tail_end(acked + nxt[:cut]) == len(acked)


@settings(max_examples=300, deadline=None)
@given(acked_and_next(), st.data())
def test_zero_filled_sectors_after_the_last_acknowledged_line_are_cut(
    case: tuple[bytes, bytes], data: st.DataObject
) -> None:
    acked, nxt = case
    # the sector holding the end of the acknowledged bytes either never reached the disk
    # after them (zeros from the line's start) or did, with the next line's first bytes
    rest = -len(acked) % SECTOR
    written = data.draw(st.sampled_from([0, rest] if 0 < rest < len(nxt) else [0]))
    zeros = data.draw(st.integers(1, 3)) * SECTOR - (len(acked) + written) % SECTOR
    after = data.draw(st.sampled_from([b"", nxt[written:][:200]]))
    torn = nxt[:written] + b"\0" * zeros + (after if zeros > 1 else b"")
    assert tail_end(acked + torn) == len(acked)


@settings(max_examples=500, deadline=None)
@given(acked_and_next(), st.data())
def test_no_single_byte_change_to_acknowledged_lines_is_ever_cut(
    case: tuple[bytes, bytes], data: st.DataObject
) -> None:
    acked, _ = case
    at = data.draw(st.integers(0, len(acked) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != acked[at]))
    changed = acked[:at] + bytes([value]) + acked[at + 1 :]
    assert tail_end(changed) == len(changed)


def test_a_whole_record_cut_before_its_checksum_by_a_lost_sector_is_cut() -> None:
    """The record's JSON ends exactly on a sector boundary and the next sector (checksum and
    newline) never reached the disk: a torn write, not damage (Hypothesis found this one)."""
    for pad in range(SECTOR):  # grow the text until the JSON ends on a sector boundary
        b = JournalBuilder("prop-run", prompt="p")
        b.add("user", user_payload("acknowledged"))
        nxt = b.add("user", {"content": [text("x" * pad)]})
        acked = b"".join(frame(r) for r in b.records[:-1])
        if (len(acked) + len(nxt.raw)) % SECTOR == 0:
            break
    else:
        raise AssertionError("no padding put the record's end on a sector boundary")
    for zeros in (2, SECTOR):
        assert tail_end(acked + nxt.raw + b"\0" * zeros) == len(acked)
    # a single NUL could be one changed byte: left to the walk, which reports it
    assert tail_end(acked + nxt.raw + b"\0") == len(acked) + len(nxt.raw) + 1
