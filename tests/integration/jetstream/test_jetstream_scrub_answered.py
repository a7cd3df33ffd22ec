"""On JetStream the scrubber and ``journald verify`` check the answered-id chunks a run's fold
snapshot references (docs/design.md#answered-ids): a chunk object removed from
``<STREAM>_ATTACHMENTS`` behind the daemon's back makes the run ``corrupted`` in the next
background pass, with a finding naming the chunk, and ``journald verify RUN`` exits non-zero
naming it; the healthy run beside it is flagged by neither. ``Delete`` removes the chunks with
the run's other objects.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import nats

from journald.core.answered import ANSWERED_FORMAT
from journald.storage.jetstream.buckets import ATTACHMENTS, bucket_name
from journald.storage.jetstream.objects import ObjectBucket
from tests.daemon import Daemon
from tests.integration.jetstream.test_jetstream_scrub_pages import remove_object
from tests.integration.jetstream.test_jetstream_side_data import objects_of
from tests.integration.rpc import stub
from tests.integration.server.test_damaged_runs import cli
from tests.integration.server.test_scrub import FAST_SCRUB, statuses
from tests.integration.server.test_scrub_answered import HEALTHY, RUN, write_calls
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until


async def chunks_of(url: str, stream: str, run_id: str) -> list[str]:
    """The run's attachment objects that are answered-id chunks."""
    nc = await nats.connect(url)
    try:
        bucket = ObjectBucket(nc, bucket_name(stream, ATTACHMENTS))
        out = []
        for name in await bucket.names(run_id + "/"):
            raw = await bucket.read(name)
            if raw is not None and raw.startswith(b'{"format":"' + ANSWERED_FORMAT.encode()):
                out.append(name.split("/", 1)[1])
        return out
    finally:
        await nc.close()


def test_an_answered_chunk_removed_from_the_bucket_is_found_by_a_scrub_pass_and_by_verify(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    sock = Path(f"/tmp/jd-scrubans-{os.getpid()}-{stream}/s")
    flags = ("--nats-url", url, "--stream", stream, *FAST_SCRUB)
    with (
        Daemon(tmp_path, "jetstream", *flags, socket=sock) as d,
        jc.connect(str(d.socket)) as c,
    ):
        write_calls(c, RUN)
        write_calls(c, HEALTHY)
        s = stub(d.target)
        chunks = asyncio.run(chunks_of(url, stream, RUN))
        assert len(chunks) >= 2
        asyncio.run(remove_object(url, stream, f"{RUN}/{chunks[0]}"))
        wait_until(lambda: statuses(s)[RUN][0] == "corrupted", what="a pass flags the run")
        error = statuses(s)[RUN][1]
        assert f"answered-id chunk {chunks[0]}" in error, error
        assert statuses(s)[HEALTHY] == ("open", "")
        res = cli(d, "verify", RUN)
        assert res.returncode != 0
        assert chunks[0] in res.stdout + res.stderr, res.stdout + res.stderr
        assert cli(d, "verify", HEALTHY).returncode == 0
        assert asyncio.run(chunks_of(url, stream, HEALTHY))
        assert c.delete(HEALTHY)
        assert asyncio.run(objects_of(url, stream, HEALTHY)) == []
