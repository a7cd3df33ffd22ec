"""What a lease costs the daemon while it is merely held (docs/benchmarks.md#memory): no
work on the loop per lease, and no copy of the answer it was granted with.

The daemon's service runs in-process on a real gRPC server bound to a temp unix socket, over
a real ``FileStore``, so the test can see the daemon's event loop and its suspended streams.
Counts are counted over an observation window, never timed.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from journald.server import edge
from journald.server.convert import fingerprint_to_pb
from journald.server.service import JournalService
from journald.storage.file.store import FileStore
from tests.builders import FP, text
from tests.integration.rpc import blocks

HELD = 200
"""Leases held in the idle test: half as Open streams, half over one Leases stream."""
WATCH_S = 2.0
"""How long the idle loop is watched (a window to count in, not a bound on speed)."""
IDLE_CALLBACKS_MAX = 40
"""Callbacks the loop may run in the window whatever the number of leases (gRPC's own)."""
BIG_PROMPT_BYTES = 2 * 1024 * 1024


@dataclass
class InProcessDaemon:
    service: JournalService
    stub: Any
    """A ``grpc.aio`` stub (the generated stub types are those of the sync API)."""


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[InProcessDaemon]:
    service = JournalService(FileStore(tmp_path / "data"))
    server = grpc.aio.server()
    edge.add_service(server, service.parts(), 16 * 1024 * 1024)
    server.add_insecure_port(f"unix://{tmp_path / 'journald.sock'}")
    await server.start()
    channel = grpc.aio.insecure_channel(
        f"unix://{tmp_path / 'journald.sock'}",
        options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
    )
    try:
        yield InProcessDaemon(service, pbg.JournalServiceStub(channel))
    finally:
        await channel.close(None)
        await service.shutdown()
        await server.stop(None)


def open_request(run_id: str, prompt_json: bytes = b"[]") -> pb.OpenRequest:
    return pb.OpenRequest(
        run_id=run_id,
        mode=pb.OPEN_MODE_CREATE,
        fingerprint=fingerprint_to_pb(FP),
        prompt_json=prompt_json,
        client=pb.ClientInfo(name="holder", pid=1, host="h"),
    )


class CountedCallbacks:
    """Counts every callback the running (asyncio) loop runs, timers included, while on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.ran = 0
        real = asyncio.Handle._run

        def counted(handle: asyncio.Handle) -> None:
            if self.on:
                self.ran += 1
            real(handle)

        monkeypatch.setattr(asyncio.Handle, "_run", counted)


async def test_two_hundred_idle_held_leases_run_nothing_on_the_loop_per_lease(
    daemon: InProcessDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop) or not hasattr(loop, "_scheduled"):
        pytest.fail(f"this test counts the callbacks of asyncio's own loop; it got {loop!r}")
    opens = []
    for i in range(HELD // 2):
        call = daemon.stub.Open(open_request(f"open-{i}"))
        assert (await call.read()).HasField("lease")
        opens.append(call)
    done = asyncio.Event()

    async def requests() -> AsyncIterator[pb.LeasesRequest]:
        for i in range(HELD // 2):
            yield pb.LeasesRequest(request_id=i + 1, acquire=open_request(f"mux-{i}"))
        await done.wait()  # the leases live as long as the stream

    leases = daemon.stub.Leases(requests())
    for _ in range(HELD // 2):
        assert (await leases.read()).HasField("lease")
    assert len(daemon.service.leases) == HELD
    await asyncio.sleep(0.5)  # the grants' own follow-ups (listing notices) have run

    counted = CountedCallbacks(monkeypatch)
    timers_before = len(loop._scheduled)
    counted.on = True
    await asyncio.sleep(WATCH_S)
    counted.on = False

    # the window's own sleep is one timer and one callback: the rest is the daemon's
    assert counted.ran <= IDLE_CALLBACKS_MAX, (
        f"{counted.ran} callbacks ran on the loop in {WATCH_S} s with {HELD} idle leases held"
    )
    assert timers_before <= IDLE_CALLBACKS_MAX, f"{timers_before} timers scheduled"
    done.set()
    leases.cancel()
    for call in opens:
        call.cancel()


def suspended_daemon_frames() -> Iterator[Any]:
    """The frames of the daemon's suspended coroutines and async generators."""
    for obj in gc.get_objects():
        frame = None
        if inspect.isasyncgen(obj):
            frame = obj.ag_frame
        elif inspect.iscoroutine(obj):
            frame = obj.cr_frame
        if frame is not None and "/journald/" in frame.f_code.co_filename:
            yield frame


async def test_a_held_open_stream_keeps_no_copy_of_the_state_it_answered_with(
    daemon: InProcessDaemon,
) -> None:
    call = daemon.stub.Open(open_request("big-prompt", blocks(text("x" * BIG_PROMPT_BYTES))))
    first = await call.read()
    assert first.lease.state.messages, "the answer carries the prompt"
    del first
    await asyncio.sleep(0.2)  # the daemon's stream is suspended, waiting for the lease's end
    gc.collect()
    kept = [
        f"{frame.f_code.co_qualname} holds {name} ({type(value).__name__})"
        for frame in suspended_daemon_frames()
        for name, value in frame.f_locals.items()
        if isinstance(value, pb.OpenResponse)
        or (isinstance(value, bytes | bytearray) and len(value) >= BIG_PROMPT_BYTES)
    ]
    assert not kept, "a held lease keeps its sent answer: " + "; ".join(kept)
    call.cancel()
