"""kill -9 of the daemon under 8 concurrent writer processes: nothing acknowledged is lost,
and the clients reconnect, re-open and finish their runs with no gap and no duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import journald_client as jc

from tests.daemon import Daemon
from tests.integration.clientbin.procs import Proc, Procs
from tests.waiting import NotYet, eventually

WRITERS = 8


def _acks(proc: Proc) -> dict[int, tuple[str, bool]]:
    out: dict[int, tuple[str, bool]] = {}
    for line in proc.lines():
        if line.startswith("ACK "):
            _, seq, digest, dup = line.split()
            assert int(seq) not in out, f"seq {seq} acknowledged twice:\n{proc.text()}"
            out[int(seq)] = (digest, dup == "True")
    return out


def _wait_all(procs: list[Proc], at_least: list[int], timeout_s: float = 60.0) -> None:
    def enough() -> None:
        counts = [len(_acks(p)) for p in procs]
        if all(c >= n for c, n in zip(counts, at_least, strict=True)):
            return
        for p in procs:
            assert p.popen.poll() is None, f"writer exited early:\n{p.text()}"
        raise NotYet(f"acks {counts}, wanted {at_least}")

    eventually(enough, what="every writer's acks", timeout_s=timeout_s)


def test_every_acknowledged_record_survives_a_daemon_kill_and_writers_finish_cleanly(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, "file")
    stop = tmp_path / "stop"
    with Procs() as procs:
        daemon.start()
        try:
            writers = [
                procs.module(
                    "tests.integration.clientbin.steady_writer",
                    "--socket",
                    str(daemon.socket),
                    "--run-id",
                    f"w{i}",
                    "--stop-file",
                    str(stop),
                    out=tmp_path / f"w{i}.out",
                )
                for i in range(WRITERS)
            ]
            _wait_all(writers, [6] * WRITERS)
            daemon.kill9()
            before = [len(_acks(w)) for w in writers]
            daemon.start()
            # every writer must append again after the restart (through the reconnect path)
            _wait_all(writers, [n + 4 for n in before])
            stop.touch()
            codes = [w.wait(60) for w in writers]
            assert codes == [0] * WRITERS, "\n".join(w.text() for w in writers)

            with jc.connect(str(daemon.socket)) as client:
                for i, w in enumerate(writers):
                    run_id = f"w{i}"
                    acks = _acks(w)
                    done = w.wait_for_line("DONE").split()
                    last_seq, reconnects = int(done[1]), int(done[2])
                    assert reconnects >= 1, w.text()

                    records = list(client.load(run_id))
                    seqs = [r.seq for r in records]
                    assert seqs == list(range(1, last_seq + 1)), f"{run_id}: gap or duplicate"
                    by_seq = {r.seq: r for r in records}
                    for seq, (digest, _dup) in acks.items():
                        assert by_seq[seq].hash == digest, f"{run_id} seq {seq} differs"
                    assert set(acks) == set(seqs), f"{run_id}: unacknowledged records"

                    # no record was written twice under another seq
                    texts = [
                        json.dumps(r.payload, sort_keys=True)
                        for r in records
                        if r.kind in ("assistant", "tool_result")
                    ]
                    assert len(texts) == len(set(texts)), f"{run_id}: duplicated content"

                    assert client.verify(run_id).last_seq == last_seq
                    state = client.fold(run_id)
                    assert state.completed
                    assert state.pending is None
                    assert state.anomalies == []
                    steps = (last_seq - 2) // 2
                    assert state.counters.llm_calls == steps
                    assert state.counters.tool_calls == steps
        finally:
            daemon.kill9()
