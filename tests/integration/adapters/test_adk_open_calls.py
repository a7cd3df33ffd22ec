"""A function call still running in the process that wrote it is not shown as abandoned.

``JournaldSessionService`` gives a session's writer lease back after ``idle_release_s`` without
writes, and shows a session with no writer and an open call as having lost that call (the
process died in the tool). A tool that runs longer than the idle time is not dead: its
session keeps the lease until the response is written, so a read in the meantime shows the
call open, as ``DatabaseSessionService`` does. Found as a differential-test flake on a loaded
machine, where 0.5 s between two operations is common.
"""

from __future__ import annotations

import asyncio

import pytest
from google.adk.sessions.base_session_service import GetSessionConfig
from journald_client.adk import JournaldSessionService
from journald_client.adk.records import session_run_id

from tests.daemon import Daemon
from tests.integration.adapters.adk_sides import calls, reply, responses, user_text
from tests.waiting import wait_until

pytestmark = pytest.mark.shared_daemon("file")
IDLE_S = 0.05


def test_a_session_whose_call_is_still_running_keeps_its_lease_and_shows_no_abandoned_response(
    daemon: Daemon,
) -> None:
    async def go() -> None:
        service = JournaldSessionService(socket=str(daemon.socket), idle_release_s=IDLE_S)
        try:
            quiet = await service.create_session(app_name="calls", user_id="ann", session_id="q")
            await service.append_event(quiet, reply("done"))
            busy = await service.create_session(app_name="calls", user_id="ann", session_id="b")
            await service.append_event(busy, user_text("look it up"))
            await service.append_event(busy, calls("c1"))
            # the idle reaper has run past both sessions: the one without a call let go
            quiet_run = session_run_id("calls", "ann", "q")
            wait_until(lambda: quiet_run not in service._writers, what="the idle lease to go")
            assert session_run_id("calls", "ann", "b") in service._writers
            seen = await service.get_session(
                app_name="calls",
                user_id="ann",
                session_id="b",
                config=GetSessionConfig(num_recent_events=5),
            )
            assert seen is not None
            assert [e.id for e in seen.events][-1] != "journald-abandoned-c1"
            assert not any("abandoned" in (e.id or "") for e in seen.events)
            await service.append_event(busy, responses("c1"))
            wait_until(
                lambda: session_run_id("calls", "ann", "b") not in service._writers,
                what="the lease to go once the call is answered",
            )
        finally:
            service.close_sync()

    asyncio.run(go())
