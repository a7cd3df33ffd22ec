"""docs/protocol.md states facts a client is built from; these tests hold them to the code.

The example journal lines must be records the daemon would store (canonical, chained), and
the patterns and limits the page gives must be the ones the schema and the daemon enforce.
"""

from __future__ import annotations

import re
from pathlib import Path

from journald.core import records
from journald.core.records import decode, sha256_hex
from journald.core.schema import schema_document
from journald.server.runs import Limits

PAGE = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text("utf-8")


def section(anchor_heading: str) -> str:
    start = PAGE.index(anchor_heading)
    end = PAGE.find("\n#", start + len(anchor_heading))
    return PAGE[start : end if end != -1 else None]


def test_the_example_journal_lines_are_canonical_records_linked_by_their_hashes() -> None:
    block = re.search(r"```json\n(.*?)```", section("### Stored record form"), re.DOTALL)
    assert block is not None
    lines = [line.encode() for line in block.group(1).splitlines()]
    recs = [decode(line) for line in lines]  # refuses anything not canonical
    assert [r.seq for r in recs] == list(range(recs[0].seq, recs[0].seq + len(recs)))
    for before, after in zip(lines, recs[1:], strict=False):
        assert after.prev == sha256_hex(before)


def test_the_timestamp_pattern_is_the_schemas() -> None:
    block = re.search(r"```\n(\^.*?\$)\n```", section("### Timestamps"))
    assert block is not None
    envelope = schema_document()["$defs"]["envelope"]["properties"]
    meta = schema_document()["$defs"]["meta"]["properties"]
    assert block.group(1) == envelope["ts"]["pattern"] == meta["created"]["pattern"]


def test_the_id_and_label_rules_are_the_ones_enforced() -> None:
    meta = schema_document()["$defs"]["meta"]["properties"]
    assert f"`{meta['run_id']['pattern']}`" in section("## Run ids")
    assert f"at most {records.MAX_ID_BYTES} bytes" in section("## Run ids")
    assert f"`{meta['labels']['propertyNames']['pattern']}`" in PAGE


def test_the_limits_table_gives_the_daemons_defaults() -> None:
    limits = section("## Limits")
    mib = 1024 * 1024
    assert f"| {Limits().max_record_bytes // mib} MiB (`--max-record-bytes`)" in limits
    assert f"| {Limits().gap_wait_s} s |" in limits
    assert records.MAX_SAFE_INT == 2**53 - 1
    assert "±(2^53 − 1)" in limits
