"""File backend: reading the tail of a long segmented run touches only the tail segments."""

from __future__ import annotations

from pathlib import Path

from journald.core.records import GENESIS, Record, make_record, sha256_hex
from journald.storage.file.store import FileStore
from tests.builders import TS, meta_payload

RUN = "long-run"
TOTAL = 100_000
PER_SEGMENT = 2_000


def user_record(seq: int, prev: str) -> Record:
    """A small user record; its canonical bytes are templated for speed (checked below)."""
    raw = (
        f'{{"prev":"{prev}","seq":{seq},"ts":"{TS}","type":"journald.v1.record.user",'
        f'"user":{{"content":[{{"text":"{seq}","type":"text"}}]}},"v":1}}'
    ).encode()
    payload = {"content": [{"type": "text", "text": str(seq)}]}
    return Record(seq, "user", TS, prev, payload, None, raw, sha256_hex(raw))


def long_run() -> list[Record]:
    out = [make_record(1, "meta", meta_payload(RUN, prompt="long"), GENESIS, TS)]
    for seq in range(2, TOTAL + 1):
        out.append(user_record(seq, out[-1].hash))
    return out


def test_the_templated_records_are_the_canonical_ones() -> None:
    for seq, prev in ((2, GENESIS), (99_999, "ab" * 32)):
        rec = user_record(seq, prev)
        assert rec == make_record(seq, "user", rec.payload, prev, TS)


async def test_reading_the_last_records_of_a_100k_run_opens_only_the_tail_segments(
    tmp_path: Path,
) -> None:
    records = long_run()
    store = FileStore(tmp_path, segment_max_records=PER_SEGMENT)
    journal = await store.create(records[0])
    await journal.append(records[1:PER_SEGMENT])
    for start in range(PER_SEGMENT, TOTAL, PER_SEGMENT):
        await journal.append(records[start : start + PER_SEGMENT])
    await journal.close()
    assert (await store.info(RUN)).record_count == TOTAL
    segments = TOTAL // PER_SEGMENT
    index = await store.segments(RUN)
    assert [(s.first_seq, s.last_seq) for s in index][-2:] == [
        (TOTAL - 2 * PER_SEGMENT + 1, TOTAL - PER_SEGMENT),
        (TOTAL - PER_SEGMENT + 1, TOTAL),
    ]
    assert sum(s.messages for s in index) == TOTAL  # the prompt and one per user record

    for n, touched in ((50, 1), (PER_SEGMENT + 10, 2)):
        before = store.segment_opens
        tail = [r async for r in store.iter_records(RUN, from_seq=TOTAL - n + 1)]
        assert [r.raw for r in tail] == [r.raw for r in records[-n:]]
        assert store.segment_opens - before == touched

    before = store.segment_opens
    from_seq = TOTAL - 3 * PER_SEGMENT + 1
    tail = await store.load(RUN, from_seq=from_seq)
    assert [r.seq for r in tail] == list(range(from_seq, TOTAL + 1))
    assert store.segment_opens - before == segments - (from_seq - 1) // PER_SEGMENT == 3
