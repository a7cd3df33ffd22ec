"""On JetStream the scrubber and ``journald verify`` check the message pages a run's rebases
reference (docs/design.md#message-pages): a page object removed from
``<STREAM>_ATTACHMENTS`` behind the daemon's back makes the run ``corrupted`` in the next
background pass, with a finding naming the page, and ``journald verify RUN`` exits non-zero
naming it; the healthy run beside it is flagged by neither.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import journald_client as jc
import nats

from journald.storage.jetstream.buckets import ATTACHMENTS, bucket_name
from journald.storage.jetstream.objects import ObjectBucket
from tests.daemon import Daemon
from tests.integration.rpc import stub
from tests.integration.server.test_damaged_runs import cli
from tests.integration.server.test_scrub import FAST_SCRUB, statuses
from tests.integration.server.test_scrub_pages import HEALTHY, RUN, write_restored
from tests.storage.backend_jetstream import fresh_stream
from tests.waiting import wait_until


async def remove_object(url: str, stream: str, name: str) -> None:
    nc = await nats.connect(url)
    try:
        await ObjectBucket(nc, bucket_name(stream, ATTACHMENTS)).remove(name)
    finally:
        await nc.close()


def test_a_page_object_removed_from_the_bucket_is_found_by_a_scrub_pass_and_by_verify(
    tmp_path: Path,
) -> None:
    url, stream, _ = asyncio.run(fresh_stream())
    sock = Path(f"/tmp/jd-scrubpg-{os.getpid()}-{stream}/s")
    flags = ("--nats-url", url, "--stream", stream, *FAST_SCRUB)
    with (
        Daemon(tmp_path, "jetstream", *flags, socket=sock) as d,
        jc.connect(str(d.socket)) as c,
    ):
        page = write_restored(c, RUN)[1]
        write_restored(c, HEALTHY)
        asyncio.run(remove_object(url, stream, f"{RUN}/{page}"))
        s = stub(d.target)
        wait_until(lambda: statuses(s)[RUN][0] == "corrupted", what="a pass flags the run")
        error = statuses(s)[RUN][1]
        assert f"message page {page}" in error, error
        assert statuses(s)[HEALTHY] == ("open", "")
        res = cli(d, "verify", RUN)
        assert res.returncode != 0
        assert page in res.stdout + res.stderr, res.stdout + res.stderr
        assert cli(d, "verify", HEALTHY).returncode == 0
