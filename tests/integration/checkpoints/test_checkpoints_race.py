"""Compaction racing with the lease holder's appends: nothing lost, nothing reordered."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import grpc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.fold import fold
from journald.core.governance import sanitize
from journald.core.paging import tail_start
from journald.core.records import decode
from tests.builders import TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, error_of, stub

STEPS = 60


def marker_of(rec: pb.Record) -> str | None:
    kind = rec.WhichOneof("payload")
    if kind == "assistant":
        content = json.loads(rec.assistant.message.content_json)
    elif kind == "user":
        content = json.loads(rec.user.content_json)
    elif kind == "tool_result":
        content = json.loads(rec.tool_result.content_json)
    else:
        return None
    marks = [b["text"] for b in content if b.get("type") == "text" and b["text"].startswith("w-")]
    return marks[0] if marks else None


class Writer:
    """The lease holder: a tool round, a reply and a follow-up per step; a record whose seq a
    rebase took is retried at the next seq (after re-reading the head)."""

    def __init__(self, s: pbg.JournalServiceStub, lease: Lease) -> None:
        self.s, self.lease = s, lease
        self.acked: list[tuple[int, str]] = []  # (seq, marker) in ack order
        self.conflicts = 0
        self.progress = threading.Event()

    def record(self, seq: int, step: int, part: int) -> pb.Record:
        mark = text(f"w-{step:03d}-{part}")
        tid = f"call-{step}"
        if part == 0:
            content = [mark, {"type": "tool_use", "id": tid, "name": "read", "input": "{}"}]
            payload = pb.AssistantPayload(
                message=pb.Message(role="assistant", content_json=blocks(*content)),
                iteration=step + 1,
                stop_reason="tool_use",
            )
            return pb.Record(seq=seq, ts=TS, assistant=payload)
        if part == 1:
            result = pb.ToolResultPayload(tool_use_id=tid, content_json=blocks(mark))
            return pb.Record(seq=seq, ts=TS, tool_result=result)
        if part == 2:
            payload = pb.AssistantPayload(
                message=pb.Message(role="assistant", content_json=blocks(mark)),
                iteration=step + 1,
                stop_reason="end_turn",
            )
            return pb.Record(seq=seq, ts=TS, assistant=payload)
        return pb.Record(seq=seq, ts=TS, user=pb.UserPayload(content_json=blocks(mark)))

    def run(self, steps: range = range(STEPS)) -> None:
        seq = self.lease.seq + 1
        for step in steps:
            for part in range(4):
                while True:
                    try:
                        resp = self.lease.append(self.record(seq, step, part))
                    except grpc.RpcError as exc:
                        if error_of(exc).code != "seq_conflict":
                            raise
                        self.conflicts += 1
                        seq = self.s.Fold(pb.FoldRequest(run_id=self.lease.run_id)).state.last_seq
                        seq += 1
                        continue
                    self.acked.append((resp.acks[0].seq, f"w-{step:03d}-{part}"))
                    self.lease.seq = resp.acks[0].seq
                    self.progress.set()
                    seq = resp.acks[0].seq + 1
                    break


def test_compaction_racing_with_appends_never_loses_or_reorders_a_record(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file", "--checkpoint-max", "3") as d:
        s = stub(d.target)
        lease = Lease(s, "race")
        writer = Writer(s, lease)
        outcomes: list[str] = []
        done = threading.Event()
        failure: list[BaseException] = []

        def write() -> None:
            try:
                writer.run()
            except BaseException as exc:  # surfaced below
                failure.append(exc)
            finally:
                done.set()

        t = threading.Thread(target=write)
        t.start()
        n = 0
        while not done.is_set():
            # compact again once the writer got a few more acks in (no starvation either way)
            seen = len(writer.acked)
            while len(writer.acked) < seen + 3 and not done.is_set():
                writer.progress.wait(0.5)
                writer.progress.clear()
            resp = s.Compact(
                pb.CompactRequest(
                    run_id="race",
                    summary=[pb.Message(role="user", content_json=blocks(text(f"summary {n}")))],
                    keep_last=3,
                    lease_id=lease.lease.lease_id,
                )
            )
            outcomes.append(resp.reason or "compacted")
            n += 1
        t.join()
        assert not failure, failure
        assert outcomes.count("compacted") >= 2, outcomes
        assert set(outcomes) <= {"compacted", "turn_running", "nothing_to_compact"}

        records = [r.record for r in s.Load(pb.LoadRequest(run_id="race"))]
        # every acknowledged record is stored at its seq, in the writer's order, exactly once
        by_seq = {r.seq: r for r in records}
        for seq, mark in writer.acked:
            assert marker_of(by_seq[seq]) == mark
        marks = [m for m in (marker_of(r) for r in records) if m is not None]
        expected = [f"w-{step:03d}-{part}" for step in range(STEPS) for part in range(4)]
        assert marks == expected
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        rebases = [r for r in records if r.WhichOneof("payload") == "rebase"]
        assert len(rebases) == outcomes.count("compacted")
        assert writer.conflicts <= len(rebases)

        # the daemon's folded state is the pure fold of what Load returns
        decoded = [decode(r.canonical) for r in records]
        state = s.Fold(pb.FoldRequest(run_id="race")).state
        folded = fold(decoded)
        assert [(m.role, json.loads(m.content_json)) for m in state.messages] == [
            (m["role"], m["content"]) for m in folded.messages
        ]

        # a final compaction: Fold gives the summary followed by the aligned kept tail
        writer.run(range(STEPS, STEPS + 3))
        records = [r.record for r in s.Load(pb.LoadRequest(run_id="race"))]
        folded = fold([decode(r.canonical) for r in records])
        msgs: list[dict[str, Any]] = sanitize(folded.messages)[0]
        summary = {"role": "user", "content": [text("final summary")]}
        resp = s.Compact(
            pb.CompactRequest(
                run_id="race",
                summary=[pb.Message(role="user", content_json=blocks(text("final summary")))],
                keep_last=5,
                lease_id=lease.lease.lease_id,
            )
        )
        assert resp.status == pb.COMPACT_STATUS_COMPACTED
        want = sanitize([summary, *msgs[tail_start(msgs, 5) :]])[0]
        after = s.Fold(pb.FoldRequest(run_id="race")).state
        assert [(m.role, json.loads(m.content_json)) for m in after.messages] == [
            (m["role"], m["content"]) for m in want
        ]
        assert len(list(s.Load(pb.LoadRequest(run_id="race")))) == len(records) + 1
        lease.close()
