"""The JetStream store binds only a safe, existing stream and says exactly how to fix one."""

from __future__ import annotations

import nats
import pytest
from nats.js.errors import NotFoundError

from journald.core.errors import BackendUnavailable, InvalidRecord
from journald.storage.jetstream.config import Cli
from journald.storage.jetstream.store import (
    RECORD_FLOOR,
    JetStreamStore,
    StreamConfigError,
    stream_add_command,
    subject_prefix,
)
from tests.builders import JournalBuilder, result_payload, unlinked
from tests.nats_server import create_stream, free_port
from tests.storage.backend_jetstream import fresh_stream, session_server


async def refusal(**overrides: object) -> tuple[str, str]:
    """(the stream's name, the refusal's one fix command, without its ``nats --server URL``)"""
    url, name, _ = await fresh_stream(**overrides)
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(url, name)
    [fix] = err.value.fixes
    assert fix in err.value.message
    prefix = f"nats --server {url} "
    assert fix.startswith(prefix)
    return name, fix.removeprefix(prefix)


async def test_a_safe_stream_binds_and_derives_its_prefix_from_the_wildcard_subject() -> None:
    url, name, prefix = await fresh_stream()
    store = await JetStreamStore.connect(url, name)
    try:
        assert store.prefix == prefix
        assert store.record_subject("run-1", 7) == f"{prefix}.run-1.7"
        assert store.meta_filter == f"{prefix}.*.1"
    finally:
        await store.close()


async def test_more_than_one_message_per_subject_is_refused_with_the_edit_fix() -> None:
    name, fix = await refusal(max_msgs_per_subject=2)
    assert fix == f"stream edit {name} -f --max-msgs-per-subject=1"


async def test_discard_old_is_refused_with_one_edit_fixing_both_discard_settings() -> None:
    name, fix = await refusal(discard="old", discard_new_per_subject=False)
    assert fix == f"stream edit {name} -f --discard=new --discard-per-subject"


async def test_discard_new_without_per_subject_is_refused_with_the_edit_fix() -> None:
    name, fix = await refusal(discard_new_per_subject=False)
    assert fix == f"stream edit {name} -f --discard-per-subject"


async def test_a_max_age_is_refused_with_the_edit_fix() -> None:
    name, fix = await refusal(max_age=3600.0)
    assert fix == f"stream edit {name} -f --max-age=0"


async def test_a_max_message_size_below_the_record_floor_is_refused_with_the_edit_fix() -> None:
    name, fix = await refusal(max_msg_size=RECORD_FLOOR // 2)
    assert fix == f"stream edit {name} -f --max-msg-size=-1"


async def test_a_max_message_size_at_the_record_floor_is_accepted() -> None:
    url, name, _ = await fresh_stream(max_msg_size=RECORD_FLOOR)
    store = await JetStreamStore.connect(url, name)
    await store.close()


async def test_interest_retention_is_refused_with_the_edit_the_server_allows() -> None:
    name, fix = await refusal(retention="interest")
    assert fix == f"stream edit {name} -f --retention=limits"


async def test_an_empty_work_queue_stream_is_refused_with_remove_and_add_lines() -> None:
    url, name, prefix = await fresh_stream(retention="workqueue")
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(url, name)
    assert "retention is workqueue" in err.value.message
    nats = f"nats --server {url}"
    assert err.value.fixes == [
        f"{nats} stream rm {name} -f",
        stream_add_command(name, prefix, cli=Cli(url)),
    ]


async def test_a_missing_stream_gets_a_ready_to_run_stream_add_line() -> None:
    url = session_server().url
    with pytest.raises(StreamConfigError) as err:
        await JetStreamStore.connect(url, "NOPE", add_prefix_hint="agents")
    msg = err.value.message
    assert "stream NOPE does not exist" in msg
    assert err.value.fixes == [
        f"nats --server {url} stream add NOPE --subjects 'agents.>' --storage file "
        "--replicas 1 --retention limits --discard new --discard-per-subject "
        "--max-msgs-per-subject=1 --max-msgs=-1 --max-bytes=-1 --max-age=0 --max-msg-size=-1 "
        "--max-consumers=-1 --dupe-window=2m --ack --allow-direct --no-allow-rollup "
        "--no-deny-delete --no-deny-purge --allow-batch --defaults"
    ]
    nc = await nats.connect(url)
    try:
        with pytest.raises(NotFoundError):
            await nc.jsm().stream_info("NOPE")  # the store never creates a stream
    finally:
        await nc.close()


async def test_a_stream_without_a_wildcard_subject_fails_construction() -> None:
    url = session_server().url
    await create_stream(url, "NOWILD", "nowild", subjects=["nowild.exact"])
    with pytest.raises(StreamConfigError, match=r"no `<prefix>\.>` wildcard subject"):
        await JetStreamStore.connect(url, "NOWILD")


async def test_a_stream_with_two_wildcard_subjects_fails_construction() -> None:
    url = session_server().url
    await create_stream(url, "TWOWILD", "twowild", subjects=["twoa.>", "twob.>"])
    with pytest.raises(StreamConfigError, match="2 wildcard subject"):
        await JetStreamStore.connect(url, "TWOWILD")


async def test_a_star_token_in_the_subject_fails_construction() -> None:
    url = session_server().url
    await create_stream(url, "STAR", "star", subjects=["star.*.>"])
    with pytest.raises(StreamConfigError, match="wildcard token"):
        await JetStreamStore.connect(url, "STAR")


@pytest.mark.parametrize(
    ("subjects", "fragment"),
    [
        ([], "no `<prefix>.>`"),
        (["a.b"], "no `<prefix>.>`"),
        (["a.>", "b.>"], "2 wildcard"),
        (["a.>", "a.b"], "1 wildcard"),
        ([">"], "not of the form"),
        (["a.*"], "not of the form"),
        (["a..>"], "empty or wildcard token"),
        ([".a.>"], "empty or wildcard token"),
        (["a.*.>"], "empty or wildcard token"),
    ],
)
def test_only_a_single_literal_prefix_wildcard_yields_a_prefix(
    subjects: list[str], fragment: str
) -> None:
    with pytest.raises(StreamConfigError, match=fragment.replace(".", r"\.").replace("*", r"\*")):
        subject_prefix("S", subjects)


def test_a_multi_token_prefix_is_kept_whole() -> None:
    assert subject_prefix("S", ["org.team.journald.>"]) == "org.team.journald"


async def test_an_unreachable_server_is_backend_unavailable_naming_the_url() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailable, match="cannot connect to NATS at") as err:
        await JetStreamStore.connect(url, "ANY", connect_timeout_s=1, connect_attempts=1)
    assert url in err.value.message
    assert not isinstance(err.value, StreamConfigError)


async def test_a_record_larger_than_the_server_payload_is_refused_naming_the_limit() -> None:
    url, name, _ = await fresh_stream()
    store = await JetStreamStore.connect(url, name)
    try:
        b = JournalBuilder("big-run")
        journal = await store.create(b.records[0])
        huge = unlinked(2, "tool_result", result_payload("t1", "x" * (2 * RECORD_FLOOR)))
        with pytest.raises(InvalidRecord) as err:
            await journal.append([huge])
        assert str(store.max_record_bytes) in err.value.message
        assert "max_payload" in err.value.message
        assert journal.last_seq == 1
        assert [r.seq for r in await store.load("big-run")] == [1]
    finally:
        await store.close()


async def test_a_comma_separated_url_list_reaches_any_live_server() -> None:
    url, name, prefix = await fresh_stream()
    dead = f"nats://127.0.0.1:{free_port()}"
    store = await JetStreamStore.connect(f"{dead}, {url}", name, connect_timeout_s=1)
    try:
        assert store.prefix == prefix
    finally:
        await store.close()


def test_one_valid_wildcard_beside_other_subjects_gets_the_exact_edit_fix() -> None:
    with pytest.raises(StreamConfigError) as err:
        subject_prefix("S", ["keep.>", "other.literal"], Cli("nats://h:4222"))
    assert err.value.fixes == ["nats --server nats://h:4222 stream edit S -f --subjects='keep.>'"]
