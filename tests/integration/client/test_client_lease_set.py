"""Many runs' leases over one ``Leases`` stream (``LeaseSet``, ``AsyncLeaseSet``) against a real
daemon: held like an Open's, released one at a time or all at once, ended by the holder's
death, fenced and durable like an Open's, and a refusal on the stream holds nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path

import grpc
import journald_client as jc
import pytest
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pbg

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.integration.clientbin.procs import Procs
from tests.waiting import eventually, wait_until

pytestmark = pytest.mark.shared_daemon("file")


def test_runs_held_over_one_stream_are_refused_locked_to_another_client(daemon: Daemon) -> None:
    with (
        jc.connect(str(daemon.socket), name="pool") as holder,
        jc.connect(str(daemon.socket), name="other") as other,
        holder.lease_set() as leases,
    ):
        runs = [leases.start(f"pool-{i}", FP, "hi") for i in range(3)]
        assert [r.last_seq for r in runs] == [1, 1, 1]
        assert len({r.lease_id for r in runs}) == 3
        for run in runs:
            with pytest.raises(jc.Locked) as held:
                other.resume(run.run_id, FP)
            assert held.value.holder_name == "pool"
            assert held.value.holder_pid == os.getpid()
        with other.lease_set() as elsewhere, pytest.raises(jc.Locked):
            elsewhere.resume("pool-1", FP)  # refused the same way on another stream
        listed = {r.run_id: r for r in other.list() if r.run_id.startswith("pool-")}
        assert {k: v.status for k, v in listed.items()} == dict.fromkeys(listed, "held")


def test_a_run_released_on_the_stream_opens_elsewhere_at_once_and_the_others_stay_held(
    daemon: Daemon,
) -> None:
    with (
        jc.connect(str(daemon.socket)) as holder,
        jc.connect(str(daemon.socket), name="next") as other,
        holder.lease_set() as leases,
    ):
        first = leases.start("handed-0", FP, "hi")
        second = leases.start("handed-1", FP, "hi")
        first.user("before the hand-over")
        first.close()  # a release on the stream: answered once the run can be opened again
        with other.resume("handed-0", FP) as taken:  # no wait: the lease is gone
            assert taken.last_seq == 2
        with pytest.raises(jc.Locked):
            other.resume("handed-1", FP)
        assert second.user("still mine").seq == 2
    # leaving the set released the rest, all at once, before it returned
    with jc.connect(str(daemon.socket)) as again, again.resume("handed-1", FP) as run:
        assert run.last_seq == 2


def test_killing_the_holder_process_ends_every_lease_on_its_stream(
    daemon: Daemon, tmp_path: Path
) -> None:
    with Procs() as procs, jc.connect(str(daemon.socket), name="survivor") as client:
        holder = procs.module(
            "tests.integration.clientbin.lease_set_holder",
            "--socket",
            str(daemon.socket),
            "--prefix",
            "killed",
            "--runs",
            "4",
            out=tmp_path / "holder.out",
        )
        ready = holder.wait_for_line("READY").split()[1:]
        assert [r.split("=")[0] for r in ready] == [f"killed-{i}" for i in range(4)]
        for i in range(4):
            with pytest.raises(jc.Locked) as held:
                client.resume(f"killed-{i}", FP)
            assert held.value.holder_pid == holder.pid
        holder.kill9()
        for i in range(4):
            run = eventually(
                lambda i=i: client.resume(f"killed-{i}", FP),  # type: ignore[misc]
                what=f"the killed holder's lease on killed-{i} to end",
                retry_on=(jc.Locked,),
            )
            with run:  # what it acknowledged before it died is there
                assert run.last_seq == 2
                assert run.state.messages[-1]["content"][-1]["text"] == f"written by killed-{i}"


def test_a_refused_acquire_holds_nothing_and_leaves_the_other_leases_held(
    daemon: Daemon,
) -> None:
    with (
        jc.connect(str(daemon.socket), name="gated") as holder,
        jc.connect(str(daemon.socket), name="other") as other,
    ):
        with other.start("gated-existing", FP, "hi"):
            pass
        with holder.lease_set() as leases:
            kept = leases.start("gated-kept", FP, "hi")
            elsewhere = dataclasses.replace(FP, provider="openai")
            with pytest.raises(jc.ProviderChanged):
                leases.resume("gated-existing", elsewhere)
            with pytest.raises(jc.SessionExists):
                leases.start("gated-existing", FP, "again")
            with pytest.raises(jc.SessionNotFound):
                leases.resume("gated-missing", FP)
            with pytest.raises(jc.InvalidId):
                leases.start("not an id", FP, "hi")
            # the refused runs are not held by anyone; the granted one still is
            with other.resume("gated-existing", FP) as free:
                assert free.last_seq == 1
            with pytest.raises(jc.Locked):
                other.resume("gated-kept", FP)
            assert kept.user("still held").seq == 2
            assert [r.run_id for r in leases.runs] == ["gated-kept"]
        assert not any(r.run_id == "gated-missing" for r in other.list())


def test_a_release_from_another_call_ends_only_that_lease_of_the_stream(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as holder, holder.lease_set() as leases:
        one = leases.start("ended-0", FP, "hi")
        two = leases.start("ended-1", FP, "hi")
        with grpc.insecure_channel(daemon.target) as ch:
            released = pbg.JournalServiceStub(ch).Release(
                pb.ReleaseRequest(run_id="ended-0", lease_id=one.lease_id)
            )
        assert released.released
        wait_until(lambda: one.lease_ended is not None, what="the stream to say the lease ended")
        assert one.lease_ended == "released"
        assert two.lease_ended is None
        assert two.user("unaffected").seq == 2


def test_many_async_opens_share_one_stream_and_close_releases_them_all(daemon: Daemon) -> None:
    async def main() -> None:
        async with await jc.connect_async(str(daemon.socket), name="async-pool") as client:
            async with client.lease_set() as leases:
                runs = await asyncio.gather(
                    *(leases.open(f"async-{i}", FP, "hi") for i in range(16))
                )
                assert all(r.created for r in runs)
                acks = await asyncio.gather(*(r.user(f"to {r.run_id}") for r in runs))
                assert [a.seq for a in acks] == [2] * 16
                with pytest.raises(jc.Locked):
                    await client.resume("async-3", FP)
                await runs[0].close()  # one at a time on the stream
                async with await client.resume("async-0", FP) as again:
                    assert again.last_seq == 2
            # every other lease ended when the set closed, before close() returned
            reopened = await asyncio.gather(
                *(client.resume(f"async-{i}", FP) for i in range(1, 16))
            )
            assert [r.last_seq for r in reopened] == [2] * 15
            for r in reopened:
                await r.close()

    asyncio.run(main())


def test_appends_under_a_stream_lease_are_durable_fenced_and_its_end_saves_the_snapshot(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        with jc.connect(str(d.socket)) as client, client.lease_set() as leases:
            run = leases.start("fenced", FP, "hi")
            ack = run.assistant("one", stop_reason="end_turn")
            assert (ack.seq, ack.durability) == (2, "fsync_local")
            stale = run.lease_id
            run.close()
            with grpc.insecure_channel(d.target) as ch:
                stub = pbg.JournalServiceStub(ch)
                rec = pb.Record(
                    seq=3,
                    ts="2026-01-01T00:00:03.000000Z",
                    user=pb.UserPayload(content_json=b'[{"type":"text","text":"late"}]'),
                )
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Append(pb.AppendRequest(run_id="fenced", lease_id=stale, records=[rec]))
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "lease_lost" in (refused.value.details() or "")
            # the lease's end saved the run's fold snapshot, as an Open's end does
            index = d.data_dir / "sessions" / "fenced" / "checkpoints" / "fold-snapshot.json"
            assert json.loads(index.read_bytes())["snapshot"]["last_seq"] == 2
            with client.resume("fenced", FP) as again:
                assert again.last_seq == 2  # the stale append wrote nothing
        d.restart()  # kill -9: what was acknowledged is on the disk
        with jc.connect(str(d.socket)) as client:
            assert client.verify("fenced").last_seq == 2


def test_a_set_run_takes_its_lease_again_over_a_new_stream_after_a_daemon_restart(
    tmp_path: Path,
) -> None:
    with (
        Daemon(tmp_path, "file") as d,
        jc.connect(str(d.socket), reconnect_timeout=60) as client,
        client.lease_set() as leases,
    ):
        runs = [leases.start(f"restarted-{i}", FP, "hi") for i in range(2)]
        runs[0].user("before")
        d.restart()  # kill -9: the stream and both leases are gone
        assert runs[0].user("after").seq == 3
        assert runs[1].user("after").seq == 2
        assert [r.reconnects for r in runs] == [1, 1]
        with (
            jc.connect(str(d.socket)) as other,
            pytest.raises(jc.Locked) as held,
        ):
            other.resume("restarted-1", FP)
        assert held.value.holder_pid == os.getpid()
