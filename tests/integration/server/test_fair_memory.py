"""Bounded memory against a real daemon (docs/design.md#fair-shares): a Load or Watch whose
client never reads holds a window of the run in the daemon, not the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import journald_client as jc
from journald_client.pb import journal_pb2 as pb
from journald_client.pb import journal_pb2_grpc as pb_grpc

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP

MiB = 1024 * 1024
RECORD_BYTES = 250_000
RECORDS = 200  # a 50 MB run in sealed segments of 1 MiB
READERS = 5  # four Loads and a Watch


def test_loads_and_watches_that_never_read_hold_a_window_in_the_daemon_not_the_run(
    tmp_path: Path,
) -> None:
    flags = ("--segment-max-bytes", str(MiB))
    with Daemon(tmp_path, "file", *flags) as daemon:
        with jc.connect(str(daemon.socket), name="writer", reconnect_timeout=0) as client:
            run = client.start("big", FP, "hello")
            for i in range(RECORDS):
                run.user(f"{i} " + "x" * RECORD_BYTES)
            run.close()
        idle_rss = daemon.vm_rss_bytes()
        run_bytes = RECORDS * RECORD_BYTES
        channel = grpc.insecure_channel(daemon.target, options=[("grpc.http2.bdp_probe", 0)])
        stub = pb_grpc.JournalServiceStub(channel)
        calls: list[Any] = [stub.Load(pb.LoadRequest(run_id="big")) for _ in range(READERS - 1)]
        calls.append(stub.Watch(pb.WatchRequest(run_id="big", from_seq=1)))
        try:
            for call in calls:  # each has started sending: what it holds is held now
                assert next(call).record.seq == 1
            grown = daemon.vm_rss_bytes() - idle_rss
            # the whole run read by each reader would be READERS x run_bytes (and more:
            # its bytes, its records, their payloads)
            assert grown < run_bytes, (
                f"{READERS} readers that do not read grew the daemon by {grown / MiB:.0f} MiB "
                f"for a run of {run_bytes / MiB:.0f} MiB"
            )
            # and they were served from the start: reading on gets every record in order
            seqs = [next(calls[0]).record.seq for _ in range(RECORDS)]
            assert seqs == list(range(2, RECORDS + 2))
        finally:
            for call in calls:
                call.cancel()
            channel.close()
