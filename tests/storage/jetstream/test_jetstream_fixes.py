"""The `nats` commands a stream refusal prints work when pasted: run by the real natscli.

For each way a stream can be unsafe for journald, the test creates such a stream on its own
nats-server, lets the store refuse it, runs every printed fix with the pinned `nats` binary
(tests/natscli.py; non-interactive: stdin is closed, so a fix that prompts fails) and shows
that the store then binds and stores a run. The `stream add` line printed for a missing stream
creates exactly deploy/nats/stream.json.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from journald.storage.jetstream.store import RECORD_FLOOR, JetStreamStore, StreamConfigError
from tests.builders import JournalBuilder
from tests.nats_server import NatsServer, create_stream, delete_stream
from tests.natscli import printed_commands, run_all

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "nats"

# Building natscli the first time (from the Go module proxy) can take minutes.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    s = NatsServer(tmp_path_factory.mktemp("nats-fixes"))
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
async def stream_name(server: NatsServer, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    name = "FIX" + "".join(c for c in request.node.name.upper() if c.isalnum())[-24:]
    yield name
    await delete_stream(server.url, name)


UNSAFE: dict[str, dict[str, object]] = {
    "more than one message per subject": {"max_msgs_per_subject": 5},
    "discard old": {"discard": "old", "discard_new_per_subject": False},
    "discard new, not per subject": {"discard_new_per_subject": False},
    "a max age": {"max_age": 3600.0},
    "a max message size below the record floor": {"max_msg_size": RECORD_FLOOR // 4},
    "interest retention": {"retention": "interest"},
    "acks off": {"no_ack": True},
    "every editable problem at once": {
        "max_msgs_per_subject": 5,
        "discard": "old",
        "discard_new_per_subject": False,
        "max_age": 60.0,
        "max_msg_size": 1000,
        "retention": "interest",
        "no_ack": True,
    },
    "an empty work-queue stream": {"retention": "workqueue"},
    "no wildcard subject": {"subjects": ["{prefix}.exact"]},
    "a literal subject beside the wildcard": {"subjects": ["{prefix}.>", "other{prefix}.lit"]},
}


async def binds_and_stores_a_run(url: str, name: str) -> str:
    store = await JetStreamStore.connect(url, name)
    try:
        b = JournalBuilder("after-fix")
        b.turn(["t1"])
        journal = await store.create(b.records[0])
        await journal.append(b.records[1:])
        await journal.close()
        assert [r.raw for r in await store.load("after-fix")] == [r.raw for r in b.records]
        return store.prefix
    finally:
        await store.close()


@pytest.mark.parametrize("case", list(UNSAFE))
async def test_the_printed_fix_run_by_natscli_makes_an_unsafe_stream_bind(
    case: str, server: NatsServer, stream_name: str, natscli: str, tmp_path: Path
) -> None:
    prefix = stream_name.lower()
    overrides: dict[str, Any] = dict(UNSAFE[case])
    if "subjects" in overrides:
        overrides["subjects"] = [s.format(prefix=prefix) for s in overrides["subjects"]]
    await create_stream(server.url, stream_name, prefix, **overrides)
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(server.url, stream_name)
    # as pasted from the message, where NATS_URL names the server for a line without --server
    run_all(printed_commands(err.value.message), natscli, tmp_path / "home", nats_url=server.url)
    bound_prefix = await binds_and_stores_a_run(server.url, stream_name)
    assert bound_prefix == ("journald" if case == "no wildcard subject" else prefix)


async def test_each_fix_is_a_whole_command_line_naming_the_server_and_never_prompting(
    server: NatsServer, stream_name: str
) -> None:
    await create_stream(server.url, stream_name, "whole", max_age=60.0, max_msgs_per_subject=3)
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(server.url, stream_name)
    assert err.value.fixes == [
        f"nats --server {server.url} stream edit {stream_name} -f --max-msgs-per-subject=1 "
        "--max-age=0"
    ]
    assert f"\nfix:\n  {err.value.fixes[0]}" in err.value.message  # on a line of its own


async def test_the_printed_add_line_creates_exactly_the_shipped_stream_definition(
    server: NatsServer, stream_name: str, natscli: str, tmp_path: Path
) -> None:
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(server.url, stream_name, add_prefix_hint="journald")
    [add] = [c for c in printed_commands(err.value.message) if " stream add " in c]
    run_all([add], natscli, tmp_path / "home", nats_url=server.url)
    nc = await nats.connect(server.url)
    try:
        reply = await nc.request(f"$JS.API.STREAM.INFO.{stream_name}", b"", timeout=5)
    finally:
        await nc.close()
    created = json.loads(reply.data)["config"]
    shipped = json.loads((DEPLOY / "stream.json").read_text())
    differ = {
        k: (v, created.get(k)) for k, v in shipped.items() if k != "name" and created.get(k) != v
    }
    assert differ == {}, f"(stream.json, created by the printed line): {differ}"
    assert add.startswith(f"nats --server {server.url} stream add {stream_name} ")
    store = await JetStreamStore.connect(server.url, stream_name)
    try:
        assert store.atomic_batches
    finally:
        await store.close()
