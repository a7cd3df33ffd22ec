"""kill -9 of the daemon under pipelined writers with appends in flight (sync and asyncio):
after the restart the writers re-open and resend what was unanswered; no acknowledged record
is lost and none is stored twice. The kill points come from a seeded generator, so a failure
names the points that found it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Proc, Procs
from tests.waiting import NotYet, eventually

KILLS = 2
CALLS = 12  # an assistant record and 12 results per step: up to 13 in flight (window 16)


def acks_of(proc: Proc) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in proc.lines():
        if line.startswith("ACK "):
            _, seq, digest, _dup = line.split()
            assert int(seq) not in out, f"seq {seq} acknowledged twice:\n{proc.text()}"
            out[int(seq)] = digest
    return out


def wait_acks(proc: Proc, at_least: int) -> None:
    def enough() -> None:
        n = len(acks_of(proc))
        if n >= at_least:
            return
        assert proc.popen.poll() is None, f"writer exited early:\n{proc.text()}"
        raise NotYet(f"{n} acks, wanted {at_least}")

    eventually(enough, what=f"{at_least} acks", timeout_s=60.0)


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_no_acknowledged_record_is_lost_or_stored_twice_when_the_daemon_dies_mid_pipeline(
    tmp_path: Path, flavour: str
) -> None:
    rng = random.Random(f"pipelined-kill-{flavour}")
    daemon = Daemon(tmp_path, "file")
    stop = tmp_path / "stop"
    run_id = f"piped-{flavour}"
    argv = ["--socket", str(daemon.socket), "--run-id", run_id, "--stop-file", str(stop)]
    argv += ["--calls", str(CALLS)] + (["--aio"] if flavour == "aio" else [])
    with Procs() as procs:
        daemon.start()
        try:
            writer = procs.module(
                "tests.integration.clientbin.pipelined_writer", *argv, out=tmp_path / "w.out"
            )
            kill_points = []
            for _ in range(KILLS):
                # a kill point between two acks, somewhere inside a step's stream of results
                point = len(acks_of(writer)) + rng.randrange(1, 3 * (CALLS + 1))
                kill_points.append(point)
                wait_acks(writer, point)
                daemon.kill9()
                daemon.start()
            wait_acks(writer, len(acks_of(writer)) + CALLS + 1)  # writing again after it
            stop.touch()
            assert writer.wait(60) == 0, writer.text()
            last_seq, reconnects = map(int, writer.wait_for_line("DONE").split()[1:])
            assert reconnects >= 1, writer.text()

            acks = acks_of(writer)
            with jc.connect(str(daemon.socket)) as client:
                records = list(client.load(run_id))
                state = client.fold(run_id)
            seqs = [r.seq for r in records]
            where = f"kill points {kill_points}"
            assert seqs == list(range(1, last_seq + 1)), f"{where}: a gap or a duplicate seq"
            assert set(acks) == set(seqs), f"{where}: stored and acknowledged differ"
            by_seq = {r.seq: r for r in records}
            for seq, digest in acks.items():
                assert by_seq[seq].hash == digest, f"{where}: seq {seq} differs"
            texts = [
                json.dumps(r.payload, sort_keys=True)
                for r in records
                if r.kind in ("assistant", "tool_result")
            ]
            assert len(texts) == len(set(texts)), f"{where}: a record stored twice"
            assert state.completed
            assert state.pending is None
            assert state.anomalies == []
            assert state.counters.tool_calls == CALLS * state.counters.llm_calls
        finally:
            daemon.kill9()
