"""ListChanges on a backend shared between daemons (docs/protocol.md#list-changes): a run
written through another daemon on the same stream reaches this daemon's ListChanges
followers, by the listing this daemon makes for them while they follow (real nats-server,
two real daemons)."""

from __future__ import annotations

import os
from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.server.test_list_changes import Notices
from tests.integration.view_runs import FP
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until


async def test_a_run_written_through_another_daemon_is_named_to_this_daemons_followers(
    tmp_path: Path,
) -> None:
    url, stream, _ = await fresh_stream()
    base = f"/tmp/jd-lch-{os.getpid()}-{stream}"
    args = ("jetstream", "--nats-url", url, "--stream", stream)
    for host in ("a", "b"):
        (tmp_path / host).mkdir()
    with (
        Daemon(tmp_path / "a", *args, socket=Path(f"{base}-a/s")) as here,
        Daemon(tmp_path / "b", *args, socket=Path(f"{base}-b/s")) as there,
        jc.connect(str(here.socket)) as jd_here,
        jc.connect(str(there.socket)) as jd_there,
    ):
        notices = Notices(jd_here)
        mark = len(notices.got)
        with jd_there.start("elsewhere", FP, "written on the other host") as run:
            run.user("hello")
        wait_until(lambda: notices.named("elsewhere", mark), what="the other host's run named")
        assert "elsewhere" in [i.run_id for i in jd_here.list()]

        mark = len(notices.got)
        assert jd_there.delete("elsewhere")
        wait_until(lambda: notices.named("elsewhere", mark), what="its deletion named")
        notices.stream.cancel()
        notices.thread.join(10)
        assert notices.error is None
