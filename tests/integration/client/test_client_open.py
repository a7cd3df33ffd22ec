"""Opening a run against a daemon that is restarting: ``start``/``resume`` wait for it as
appends do, ``open`` creates or resumes, a ``start`` whose reply was lost resumes the run it
made, and ``complete_pending`` works from the lease, not from a fresh (un-retried) Fold."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

ROOT = Path(__file__).resolve().parents[3]
TWO_CALLS = [
    {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
    {"type": "tool_use", "id": "t2", "name": "read", "input": {}},
]


class Background:
    """Run ``fn`` on a thread; ``join()`` returns its result or raises its error."""

    def __init__(self, fn: object) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: object) -> None:
        try:
            self.result = fn()  # type: ignore[operator]
        except BaseException as exc:
            self.error = exc

    def join(self, timeout_s: float = 60.0) -> object:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "still running"
        if self.error is not None:
            raise self.error
        return self.result


def test_start_waits_for_a_daemon_that_is_still_coming_up(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, "file")
    client = jc.Client(str(daemon.socket), reconnect_timeout=60)
    try:
        opening = Background(lambda: client.start("early", FP, "hi"))
        daemon.start()  # the first Open found no socket; the retry finds the daemon
        run = opening.join()
        assert isinstance(run, jc.Run)
        assert run.created
        run.user("made it")
        run.close()
        assert client.fold("early").last_seq == 2
    finally:
        client.close()
        daemon.stop()


def test_resume_waits_for_a_daemon_that_is_restarting(tmp_path: Path) -> None:
    with Daemon(tmp_path, "file") as daemon, jc.connect(str(daemon.socket)) as client:
        client.start("again", FP, "hi").close()
        daemon.kill9()
        resuming = Background(lambda: client.resume("again", FP))
        daemon.start()
        run = resuming.join()
        assert isinstance(run, jc.Run)
        assert not run.created
        run.close()


def test_a_start_whose_reply_was_lost_resumes_the_run_it_created(tmp_path: Path) -> None:
    # The daemon dies right after the meta record is durable, before it answers the Open.
    crashing = {"JOURNALD_FAILPOINTS": "after_fsync_before_advance=kill@1"}
    daemon = Daemon(tmp_path, "file", env=crashing).start()
    client = jc.Client(str(daemon.socket), reconnect_timeout=60)
    try:
        opening = Background(lambda: client.start("lost-reply", FP, "hello", labels={"a": "b"}))
        assert daemon.proc is not None
        daemon.proc.wait(60)
        daemon.env = None
        daemon.start()
        run = opening.join()
        assert isinstance(run, jc.Run)
        assert run.created  # this call made the run, even though it never saw the reply
        assert run.last_seq == 1
        run.user("continuing")
        run.close()
        records = list(client.load("lost-reply"))
        assert [r.kind for r in records] == ["meta", "user"]
        assert records[0].payload["labels"] == {"a": "b"}
    finally:
        client.close()
        daemon.stop()


def test_start_of_a_run_someone_else_created_is_still_refused(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        client.start("taken", FP, "first").close()
        with pytest.raises(jc.SessionExists):
            client.start("taken", FP, "first")


def test_open_creates_a_missing_run_and_resumes_an_existing_one(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.open("either", FP, "the prompt", labels={"team": "x"}) as run:
            assert run.created
            run.assistant("hello", stop_reason="end_turn")
        with client.open("either", FP, "ignored on resume") as run:
            assert not run.created
            assert run.next_iteration == 2
            assert run.state.prompt == [{"type": "text", "text": "the prompt"}]
            assert run.state.labels == {"team": "x"}
        other = jc.compute(provider="openai", model="m", system_prompt=[])
        with pytest.raises(jc.ProviderChanged):
            client.open("either", other)


def test_complete_pending_runs_the_calls_the_lease_reported_while_the_daemon_restarts(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as daemon, jc.connect(str(daemon.socket)) as client:
        with client.start("pending", FP, "hi") as run:
            run.assistant(TWO_CALLS, stop_reason="tool_use")
        run = client.resume("pending", FP)
        assert [c.id for c in run.open_calls] == ["t1", "t2"]
        run.tool_result("t1", "answered by hand")
        assert [c.id for c in run.open_calls] == ["t2"]
        daemon.kill9()
        ran: list[str] = []
        finishing = Background(lambda: run.complete_pending(lambda call: ran.append(call.id)))
        daemon.start()
        acks = finishing.join()
        assert ran == ["t2"]
        assert isinstance(acks, list)
        assert [a.seq for a in acks] == [4]
        assert run.open_calls == []
        run.close()
        assert client.fold("pending").pending is None


def test_entries_built_without_an_iteration_are_numbered_by_the_writer(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client, client.start("numbered", FP, "hi") as run:
        run.assistant("one", stop_reason="end_turn")
        run.append_many(
            [
                jc.Entry.assistant("two", stop_reason="pause_turn"),
                jc.Entry.assistant("three", stop_reason="end_turn"),
                jc.Entry.assistant("ten", stop_reason="end_turn", iteration=10),
            ]
        )
        assert run.next_iteration == 11
        its = [r.payload["iteration"] for r in client.load("numbered") if r.kind == "assistant"]
        assert its == [1, 2, 3, 10]


def test_load_streams_records_and_can_stop_early(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as client:
        with client.start("long", FP, "hi") as run:
            run.append_many([jc.Entry.user(f"line {i}") for i in range(200)])
        records = client.load("long")
        assert isinstance(records, Iterator)
        assert [r.seq for r in itertools.islice(records, 3)] == [1, 2, 3]
        records.close()  # cancels the stream; nothing else is read
        with pytest.raises(jc.SessionNotFound):
            next(client.load("no-such-run"))


def test_list_reports_only_the_status_words_the_proto_documents(daemon: Daemon) -> None:
    proto = (ROOT / "proto/journald/v1/journal.proto").read_text("utf-8")
    block = proto[proto.index("message RunInfo") :]
    doc = block[: block.index("string status")]
    documented = set(re.findall(r'"([a-z_]+)"', doc[doc.rindex("// Model from") :]))
    with jc.connect(str(daemon.socket)) as client:
        client.start("ended", FP, "hi").terminal("completed")
        client.start("idle", FP, "hi").close()
        held = client.start("busy", FP, "hi")
        statuses = {r.run_id: r.status for r in client.list()}
        held.close()
    assert statuses == {"ended": "completed", "idle": "open", "busy": "held"}
    assert set(statuses.values()) <= documented, documented


def test_the_async_client_opens_waits_for_the_daemon_and_streams_loads(tmp_path: Path) -> None:
    import asyncio

    daemon = Daemon(tmp_path, "file")

    async def scenario() -> None:
        client = jc.AsyncClient(str(daemon.socket), reconnect_timeout=60)
        try:
            opening = asyncio.ensure_future(client.open("aio-open", FP, "hi"))
            await asyncio.to_thread(daemon.start)
            run = await opening
            assert run.created
            await run.append_many([jc.Entry.assistant(TWO_CALLS, stop_reason="tool_use")])
            await run.tool_result("t2", "done")
            assert [c.id for c in run.open_calls] == ["t1"]
            assert [a.seq for a in await run.complete_pending(lambda call: "ok")] == [4]
            await run.close()
            again = await client.open("aio-open", FP)
            assert not again.created
            assert again.next_iteration == 2
            await again.close()
            kinds = [r.kind async for r in client.load("aio-open")]
            assert kinds == ["meta", "assistant", "tool_result", "tool_result"]
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        daemon.stop()
