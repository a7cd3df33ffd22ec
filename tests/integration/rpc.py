"""Raw-stub helpers for daemon tests (deliberately not the client wrapper)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.convert import fingerprint_to_pb
from journald.fingerprint import Fingerprint
from tests.builders import FP, TS

T = TypeVar("T")


def stub(target: str) -> pbg.JournalServiceStub:
    return pbg.JournalServiceStub(grpc.insecure_channel(target))


def error_of(exc: grpc.RpcError) -> pb.ErrorDetail:
    for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "journald-error-bin":
            return pb.ErrorDetail.FromString(value)
    raise AssertionError(f"no journald-error-bin trailer on {exc}")


def blocks(*items: dict[str, Any]) -> bytes:
    return json.dumps(list(items)).encode()


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "read", "input": '{"path":"a"}'}


class Lease:
    """An Open stream kept alive until ``close``."""

    def __init__(
        self,
        s: pbg.JournalServiceStub,
        run_id: str,
        *,
        mode: int = 0,
        fp: Fingerprint = FP,
        interactive: bool = False,
        force: bool = False,
        name: str = "tester",
        pid: int = 4242,
        host: str = "testhost",
        prompt: str = "hello",
    ) -> None:
        self.stub = s
        self.run_id = run_id
        self.call: Iterator[pb.OpenResponse] = s.Open(
            pb.OpenRequest(
                run_id=run_id,
                mode=mode or pb.OPEN_MODE_CREATE_OR_RESUME,
                fingerprint=fingerprint_to_pb(fp),
                interactive=interactive,
                force=force,
                prompt_json=blocks(text(prompt)),
                created=TS,
                client=pb.ClientInfo(name=name, pid=pid, host=host, cwd="/work"),
            )
        )
        first = next(self.call)
        self.lease = first.lease
        self.seq = self.lease.last_seq

    def append(self, *records: pb.Record) -> pb.AppendResponse:
        resp: pb.AppendResponse = self.stub.Append(
            pb.AppendRequest(
                run_id=self.run_id, lease_id=self.lease.lease_id, records=list(records)
            )
        )
        self.seq = max(self.seq, max(a.seq for a in resp.acks))
        return resp

    def next_seq(self) -> int:
        return self.seq + 1

    def assistant(self, *calls: str, seq: int | None = None, stop: str = "") -> pb.Record:
        content = [text("let me look")] + [tool_use(c) for c in calls]
        return pb.Record(
            seq=seq or self.next_seq(),
            ts=TS,
            assistant=pb.AssistantPayload(
                message=pb.Message(role="assistant", content_json=blocks(*content)),
                iteration=1,
                stop_reason=stop or ("tool_use" if calls else "end_turn"),
            ),
        )

    def result(self, tid: str, seq: int | None = None, out: str = "ok") -> pb.Record:
        return pb.Record(
            seq=seq or self.next_seq(),
            ts=TS,
            tool_result=pb.ToolResultPayload(tool_use_id=tid, content_json=blocks(text(out))),
        )

    def terminal(self, reason: str = "completed", seq: int | None = None) -> pb.Record:
        return pb.Record(
            seq=seq or self.next_seq(), ts=TS, terminal=pb.TerminalPayload(reason=reason)
        )

    def close(self) -> None:
        self.call.cancel()  # type: ignore[attr-defined]


def until_unlocked(fn: Callable[[], T], timeout_s: float = 5.0) -> T:
    """Call ``fn`` until it stops failing with ``locked`` (bounded), re-raising anything else."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except grpc.RpcError as exc:
            if error_of(exc).code != "locked" or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def write_long_run(s: pbg.JournalServiceStub, run_id: str, rounds: int, pad: int = 0) -> int:
    """A run of about ``2 * rounds`` messages (tool rounds, plain answers, follow-ups) that
    ends in an open turn, appended in batches; returns its last seq."""
    lease = Lease(s, run_id)
    filler = "x" * pad
    batch = max(1, min(500, 400_000 // (pad + 200)))  # appends well under a 1 MiB cap
    records: list[pb.Record] = []

    def add(**payload: Any) -> None:
        records.append(pb.Record(seq=lease.seq + len(records) + 1, ts=TS, **payload))

    for i in range(rounds):
        if i % 7 == 3:  # a plain answer and a follow-up: boundaries without tool results
            add(assistant=assistant_payload([text(f"answer {i} {filler}")], "end_turn"))
            add(user=pb.UserPayload(content_json=blocks(text(f"and then {i}?"))))
        else:
            add(assistant=assistant_payload([text(f"step {i}"), tool_use(f"t{i}")], "tool_use"))
            add(
                tool_result=pb.ToolResultPayload(
                    tool_use_id=f"t{i}", content_json=blocks(text(f"out {i} {filler}"))
                )
            )
        if len(records) >= batch:
            lease.append(*records)
            records.clear()
    add(assistant=assistant_payload([text("one more"), tool_use("open")], "tool_use"))
    lease.append(*records)
    lease.close()
    return lease.seq


def assistant_payload(content: list[dict[str, Any]], stop: str) -> pb.AssistantPayload:
    return pb.AssistantPayload(
        message=pb.Message(role="assistant", content_json=blocks(*content)),
        iteration=1,
        stop_reason=stop,
    )


def decoded(msgs: Any) -> list[dict[str, Any]]:
    """Proto messages as ``{role, content}`` dicts."""
    return [{"role": m.role, "content": json.loads(m.content_json)} for m in msgs]


def history_pages(
    s: pbg.JournalServiceStub, run_id: str, view: Any, page: int = 200
) -> list[dict[str, Any]]:
    """A whole message list of History (``view``), paged back to back from 0."""
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        p = s.History(pb.HistoryRequest(run_id=run_id, offset=offset, limit=page, view=view))
        assert p.offset == offset
        out.extend(decoded(p.messages))
        if p.next_offset >= p.total:
            return out
        offset = p.next_offset
