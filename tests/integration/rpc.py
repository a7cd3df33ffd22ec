"""Raw-stub helpers for daemon tests (deliberately not the client wrapper)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import grpc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.core.fingerprint import Fingerprint
from journald.server.convert import fingerprint_to_pb
from tests.builders import FP, TS, text, tool_use
from tests.waiting import eventually

T = TypeVar("T")
# keyword arguments of a channel's unary_unary & co. for a call that sends and receives bytes as
# they are (grpc defaults both to None; grpc-stubs wrongly makes them required)
RAW_BYTES: dict[str, None] = {"request_serializer": None, "response_deserializer": None}


def stub(target: str) -> pbg.JournalServiceStub:
    return pbg.JournalServiceStub(grpc.insecure_channel(target))


def trailer(exc: grpc.RpcError) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata of a failed call."""
    # grpc-stubs types the trailer as objects; at run time each item is a (key, value) tuple
    return cast("tuple[tuple[str, bytes], ...]", exc.trailing_metadata() or ())


def error_of(exc: grpc.RpcError) -> pb.ErrorDetail:
    for key, value in trailer(exc):
        if key == "journald-error-bin":
            return pb.ErrorDetail.FromString(value)
    raise AssertionError(f"no journald-error-bin trailer on {exc}")


def blocks(*items: dict[str, Any]) -> bytes:
    return json.dumps(list(items)).encode()


class Lease:
    """An Open stream kept alive until ``close``."""

    def __init__(
        self,
        s: pbg.JournalServiceStub,
        run_id: str,
        *,
        mode: pb.OpenMode.ValueType = pb.OPEN_MODE_CREATE_OR_RESUME,
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
        self.call: grpc.CallIterator[pb.OpenResponse] = s.Open(
            pb.OpenRequest(
                run_id=run_id,
                mode=mode,
                fingerprint=fingerprint_to_pb(fp),
                interactive=interactive,
                force=force,
                prompt_json=blocks(text(prompt)),
                created=TS,
                client=pb.ClientInfo(name=name, pid=pid, host=host, cwd="/work"),
            )
        )
        first = next(iter(self.call))
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
        """Cancel the Open stream: the daemon ends the lease a moment later."""
        self.call.cancel()

    def release(self) -> None:
        """End the lease now (``Release`` returns once the run can be opened again)."""
        self.stub.Release(pb.ReleaseRequest(run_id=self.run_id, lease_id=self.lease.lease_id))
        self.close()


class StillLocked(Exception):
    """``fn`` failed with ``locked``: the lease it waits for has not ended yet."""


def until_unlocked(fn: Callable[[], T], timeout_s: float = 60.0) -> T:
    """Call ``fn`` until it stops failing with ``locked`` (bounded, generously: the lease's end
    reaches the daemon asynchronously, which can take seconds on a loaded machine), re-raising
    anything else."""

    def attempt() -> T:
        try:
            return fn()
        except grpc.RpcError as exc:
            if error_of(exc).code == "locked":
                raise StillLocked(str(exc)) from exc
            raise

    return eventually(
        attempt, what="the run to be unlocked", timeout_s=timeout_s, retry_on=(StillLocked,)
    )


METHOD_PREFIX = "/journald.v1.JournalService/"
PAD_FIELD = 1000  # a field number no journald message uses


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def padded(msg: Any, extra_bytes: int) -> bytes:
    """``msg`` serialized plus an unknown field of ``extra_bytes`` zeros: a valid message of
    any size (the receiver keeps unknown fields, so it holds all of it)."""
    tag = _varint(PAD_FIELD << 3 | 2)
    return bytes(msg.SerializeToString()) + tag + _varint(extra_bytes) + bytes(extra_bytes)


def raw_unary(target: str, method: str, data: bytes, timeout: float = 30) -> grpc.RpcError:
    """Send ``data`` as the request of the unary RPC ``method``; the failure it got (the
    call must fail)."""
    with grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 1 << 30)]
    ) as channel:
        try:
            channel.unary_unary(METHOD_PREFIX + method, **RAW_BYTES)(data, timeout=timeout)
        except grpc.RpcError as exc:
            return exc
    raise AssertionError(f"{method} accepted {len(data)} bytes it should refuse")


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
            add(assistant=assistant_pb([text(f"answer {i} {filler}")], "end_turn"))
            add(user=pb.UserPayload(content_json=blocks(text(f"and then {i}?"))))
        else:
            add(assistant=assistant_pb([text(f"step {i}"), tool_use(f"t{i}")], "tool_use"))
            add(
                tool_result=pb.ToolResultPayload(
                    tool_use_id=f"t{i}", content_json=blocks(text(f"out {i} {filler}"))
                )
            )
        if len(records) >= batch:
            lease.append(*records)
            records.clear()
    add(assistant=assistant_pb([text("one more"), tool_use("open")], "tool_use"))
    lease.append(*records)
    lease.close()
    return lease.seq


def assistant_pb(content: list[dict[str, Any]], stop: str) -> pb.AssistantPayload:
    """An assistant payload as the proto message a raw stub sends (the dict form is
    ``tests.builders.assistant_payload``)."""
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
