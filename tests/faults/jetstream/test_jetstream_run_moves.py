"""On JetStream a run moves between hosts whole: records, checkpoints and attachments.

Two daemons on two data dirs (two hosts) share one nats-server. Host A starts a run, uploads an
attachment a tool result references and takes two checkpoints; A is killed -9 by its pid with
the run still held. Host B resumes the run and finds everything A made: both checkpoints, the
attachment's bytes, a restore, a fork and an export that carries the attachment.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import journald_client as jc
import pytest

from journald.core.checkpoints import verify_export
from journald.core.schema import validate_payload
from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import eventually

pytestmark = pytest.mark.slow


def two_hosts(tmp_path: Path, url: str, stream: str) -> tuple[Daemon, Daemon]:
    flags = ("--nats-url", url, "--stream", stream)
    hosts = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        sock = Path(f"/tmp/jd-mv-{name}-{os.getpid()}-{stream}/s")
        hosts.append(Daemon(tmp_path / name, "jetstream", *flags, socket=sock))
    return hosts[0], hosts[1]


def test_a_run_resumed_on_another_host_keeps_its_checkpoints_and_attachments(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream(allow_atomic=True))
    host_a, host_b = two_hosts(tmp_path, url, stream)
    picture = os.urandom(200 * 1024)
    with host_a, host_b:
        client_a = jc.connect(str(host_a.socket))
        run = client_a.start("moving", FP, "describe the picture")
        call: dict[str, Any] = {"type": "tool_use", "id": "t1", "name": "snap", "input": {}}
        run.assistant([call], stop_reason="tool_use")
        ref = client_a.put_attachment("moving", picture, "image/png", name="snap.png")
        run.tool_result("t1", [ref.block])
        run.assistant("a picture of noise", stop_reason="end_turn")
        first = run.checkpoint("after the picture")
        run.user("and now?")
        run.assistant("still noise", stop_reason="end_turn")
        second = run.checkpoint("after the follow-up")

        host_a.kill9()  # the run is still held by A's writer: A dies holding it
        client_a.close()

        with jc.connect(str(host_b.socket)) as client_b:
            assert client_b.checkpoints("moving") == [first, second]
            assert client_b.get_attachment("moving", ref.sha256) == picture
            # A's lease lasts until its daemon's key expires (docs/design.md#leases-across-hosts)
            moved = eventually(
                lambda: client_b.resume("moving", FP),
                what="A's lease to expire",
                retry_on=(jc.Locked,),
            )
            with moved:
                restored = moved.restore(first.checkpoint_id)
                assert restored.to_messages == first.message_count
                state = moved.fold()
                assert len(state.messages) == first.message_count
                moved.user("after the restore on host B")
            forked, fork_state = client_b.fork("moving", checkpoint_id=second.checkpoint_id)
            assert len(fork_state.messages) == second.message_count
            assert client_b.get_attachment(forked, ref.sha256) == picture
            exported = verify_export(
                client_b.export_checkpoint("moving", second.checkpoint_id), validate_payload
            )
            assert exported.attachments == {ref.sha256: picture}
            assert exported.meta.hash == second.hash
            assert [c.trigger for c in client_b.checkpoints("moving")] == [
                "manual",
                "manual",
                "pre_restore",
            ]
