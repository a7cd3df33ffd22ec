"""JournaldSaver behaviours beyond the conformance suite: a stale read never forks a thread,
large channel values are stored once as attachments, any thread id works, and listing
without a thread covers every thread."""

from __future__ import annotations

from typing import Any

import journald_client as jc
import pytest
from journald_client.langgraph import JournaldSaver
from langgraph.checkpoint.base import ChannelVersions, empty_checkpoint

from tests.daemon import Daemon


def checkpoint(values: dict[str, Any], versions: ChannelVersions) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def cfg(thread: str, parent: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    return {"configurable": conf}


def test_a_write_on_a_read_that_went_stale_is_refused_instead_of_forking(daemon: Daemon) -> None:
    sock = str(daemon.socket)
    with JournaldSaver(socket=sock, name="a") as a, JournaldSaver(socket=sock, name="b") as b:
        first = b.put(cfg("t"), checkpoint({}, {}), {"step": 0}, {})
        b.release("t")
        seen = a.get_tuple(cfg("t"))  # a reads without the lease
        assert seen is not None
        second = b.put(
            cfg("t", first["configurable"]["checkpoint_id"]), checkpoint({}, {}), {"step": 1}, {}
        )
        b.release("t")
        with pytest.raises(jc.SeqConflict, match="changed since this process read it"):
            a.put(
                cfg("t", first["configurable"]["checkpoint_id"]),
                checkpoint({}, {}),
                {"step": 1},
                {},
            )
        latest = a.get_tuple(cfg("t"))  # a fresh read, then the write goes through
        assert latest is not None
        assert (
            latest.config["configurable"]["checkpoint_id"]
            == second["configurable"]["checkpoint_id"]
        )
        a.put(
            cfg("t", second["configurable"]["checkpoint_id"]), checkpoint({}, {}), {"step": 2}, {}
        )
        assert [t.metadata["step"] for t in a.list(cfg("t"))] == [2, 1, 0]


def test_a_large_unchanged_value_is_stored_once_and_read_back_whole(daemon: Daemon) -> None:
    big = "x" * 100_000
    with JournaldSaver(socket=str(daemon.socket)) as saver:
        one = saver.put(
            cfg("big"), checkpoint({"doc": big, "n": 1}, {"doc": 1, "n": 1}), {}, {"doc": 1, "n": 1}
        )
        two = saver.put(
            cfg("big", one["configurable"]["checkpoint_id"]),
            checkpoint({"doc": big, "n": 2}, {"doc": 1, "n": 2}),
            {},
            {"n": 2},  # doc did not change: not stored again
        )
        state = saver.client.fold("big")
        blobs = [e for e in state.state if e.namespace == "langgraph.blob"]
        assert sorted((e.key, bool(e.sha256)) for e in blobs) == [
            ('["","doc","1"]', True),
            ('["","n","1"]', False),
            ('["","n","2"]', False),
        ]
        saver.release("big")  # read back through Fold and GetAttachment, not the writer's memory
        got = saver.get_tuple(two)
        assert got is not None
        assert got.checkpoint["channel_values"] == {"doc": big, "n": 2}


def test_any_thread_id_maps_to_a_run_and_listing_all_threads_finds_it(daemon: Daemon) -> None:
    odd = "user 42 / chat #7 ✓"
    with JournaldSaver(socket=str(daemon.socket)) as saver:
        saver.put(cfg(odd), checkpoint({}, {}), {"source": "input"}, {})
        saver.put(cfg("plain"), checkpoint({}, {}), {"source": "loop"}, {})
        found = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert found == {odd, "plain"}
        only = list(saver.list(None, filter={"source": "input"}))
        assert [t.config["configurable"]["thread_id"] for t in only] == [odd]
        saver.delete_thread(odd)
        assert saver.get_tuple(cfg(odd)) is None
