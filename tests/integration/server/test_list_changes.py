"""ListChanges tells a live listing when to List again (docs/protocol.md#list-changes): a
notice naming each run as it is created, appended to, released and deleted, the untouched
runs never named, a burst of appends coalesced into a few notices, and the stream ending
cleanly when the daemon stops. Real daemon, real client."""

from __future__ import annotations

import threading

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.view_runs import FP
from tests.waiting import wait_until


class Notices:
    """The notices of one ListChanges stream, read by a thread as they arrive."""

    def __init__(self, client: jc.Client) -> None:
        self.stream = client.list_changes()
        self.got: list[jc.ListChange] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        wait_until(lambda: self.got, what="the ready notice")
        assert self.got[0] == jc.ListChange(ready=True, run_ids=(), all=False)

    def _read(self) -> None:
        try:
            for change in self.stream:
                self.got.append(change)
        except BaseException as exc:  # the test asserts there was none
            self.error = exc

    def named(self, run_id: str, after: int) -> bool:
        return any(run_id in c.run_ids for c in self.got[after:])


def test_list_changes_names_a_run_as_it_is_created_appended_released_and_deleted(
    daemon: Daemon,
) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        with jd.start("bystander", FP, "x") as other:
            other.user("hello")
        notices = Notices(jd)
        mark = len(notices.got)
        with jd.start("busy", FP, "x") as run:
            wait_until(lambda: notices.named("busy", mark), what="the created run named")
            assert jd.list()[0].status == "held"  # what a List after the notice shows

            mark = len(notices.got)
            run.user("more")
            wait_until(lambda: notices.named("busy", mark), what="the append named")
            assert next(i for i in jd.list() if i.run_id == "busy").last_seq == run.last_seq

            mark = len(notices.got)
        wait_until(lambda: notices.named("busy", mark), what="the release named")
        wait_until(
            lambda: next(i for i in jd.list() if i.run_id == "busy").status == "open",
            what="the run listed as released",
        )

        mark = len(notices.got)
        assert jd.delete("busy")
        wait_until(lambda: notices.named("busy", mark), what="the deletion named")
        assert [i.run_id for i in jd.list()] == ["bystander"]

        # the run nobody touched after the stream began was never named
        assert not notices.named("bystander", 1)
        assert all(not c.all and not c.ready for c in notices.got[1:])
        notices.stream.cancel()
        notices.thread.join(10)
        assert notices.error is None


def test_a_burst_of_appends_is_told_in_a_few_notices_and_the_stream_ends_with_the_daemon(
    daemon: Daemon,
) -> None:
    appends = 150
    with jc.connect(str(daemon.socket)) as jd:
        notices = Notices(jd)
        with jd.start("burst", FP, "x") as run:
            mark = len(notices.got)
            for i in range(appends):
                run.user(f"message {i}")
            last = run.last_seq
        wait_until(
            lambda: (
                notices.named("burst", mark)
                and next(i for i in jd.list() if i.run_id == "burst").last_seq == last
            ),
            what="the burst listed",
        )
        # notices are coalesced (0.2 s each): far fewer than the appends
        assert len(notices.got) - mark < appends // 3

        daemon.stop()
        notices.thread.join(20)
        assert not notices.thread.is_alive()  # the daemon stopping ended the stream
        assert notices.error is None
