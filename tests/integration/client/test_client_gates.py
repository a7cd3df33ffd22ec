"""Every resume gate through the Python client, each as its exact typed exception."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import journald_client as jc
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP


@pytest.fixture
def client(daemon: Daemon) -> Iterator[jc.Client]:
    with jc.connect(str(daemon.socket), name="gates") as c:
        yield c


def _make(client: jc.Client, run_id: str, *, interactive: bool = False) -> None:
    with client.start(run_id, FP, "hello", interactive=interactive) as run:
        run.assistant("hi", stop_reason="end_turn")


def test_resuming_a_completed_run_raises_completed(client: jc.Client) -> None:
    with client.start("done", FP, "hello") as run:
        run.terminal("completed")
    with pytest.raises(jc.Completed) as info:
        client.resume("done", FP, force=True)
    assert type(info.value) is jc.Completed


def test_a_suspended_run_can_be_resumed(client: jc.Client) -> None:
    with client.start("paused", FP, "hello") as run:
        run.terminal("suspended", "lunch")
    with client.resume("paused", FP) as run:
        assert run.state.terminal == jc.state.Terminal("suspended", "lunch")


@pytest.mark.parametrize(("stored", "current"), [(False, True), (True, False)])
def test_interactivity_mismatch_is_refused_in_either_direction(
    client: jc.Client, stored: bool, current: bool
) -> None:
    _make(client, f"inter-{stored}", interactive=stored)
    with pytest.raises(jc.InteractivityMismatch):
        client.resume(f"inter-{stored}", FP, interactive=current, force=True)


def test_a_provider_change_is_refused_even_with_force(client: jc.Client) -> None:
    _make(client, "prov")
    moved = dataclasses.replace(FP, provider="openai")
    with pytest.raises(jc.ProviderChanged):
        client.resume("prov", moved)
    with pytest.raises(jc.ProviderChanged):
        client.resume("prov", moved, force=True)


def test_fingerprint_drift_carries_the_exact_per_field_diff(client: jc.Client) -> None:
    _make(client, "drift")
    drifted = jc.compute(
        provider=FP.provider,
        model="claude-next",
        system_prompt=["You are a different agent."],
        tools=[{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
        thinking="off",
        max_tokens=4096,
        max_iterations=FP.max_iterations,
    )
    with pytest.raises(jc.FingerprintDrift) as info:
        client.resume("drift", drifted)
    assert info.value.diff == [
        "model: claude-test -> claude-next",
        "system prompt: changed",
        "max_tokens: 1024 -> 4096",
    ]


def test_force_waives_drift(client: jc.Client) -> None:
    _make(client, "forced")
    drifted = dataclasses.replace(FP, model="claude-next", tools_sha256="0" * 64)
    with client.resume("forced", drifted, force=True) as run:
        assert run.state.fingerprint == FP
        run.assistant("carrying on", stop_reason="end_turn")
    assert client.fold("forced").counters.llm_calls == 2


def test_the_gates_apply_in_order(client: jc.Client) -> None:
    with client.start("ordered", FP, "hello") as run:
        run.terminal("completed")
    everything = dataclasses.replace(FP, provider="openai", model="other")
    with pytest.raises(jc.Completed):
        client.resume("ordered", everything, interactive=True)
    _make(client, "ordered2")
    with pytest.raises(jc.InteractivityMismatch):
        client.resume("ordered2", everything, interactive=True)
    with pytest.raises(jc.ProviderChanged):
        client.resume("ordered2", everything)


def test_starting_an_existing_run_and_resuming_a_missing_one_are_typed(client: jc.Client) -> None:
    _make(client, "exists")
    with pytest.raises(jc.SessionExists):
        client.start("exists", FP, "again")
    with pytest.raises(jc.SessionNotFound):
        client.resume("missing", FP)
    with pytest.raises(jc.InvalidId):
        client.start("../escape", FP, "x")


def test_an_interactive_run_resumed_after_an_answer_waits_for_input(client: jc.Client) -> None:
    _make(client, "chat", interactive=True)
    with client.resume("chat", FP, interactive=True) as run:
        assert run.resume_at_input_boundary
        assert run.state.resume_at_input_boundary
        assert run.warnings == []
        run.user("a follow-up")
    with client.resume("chat", FP, interactive=True) as run:
        assert not run.resume_at_input_boundary
        assert run.next_iteration == 2


def test_resuming_on_a_paused_turn_warns(client: jc.Client) -> None:
    with client.start("paused-turn", FP, "hello") as run:
        run.assistant("thinking...", stop_reason="pause_turn")
    with client.resume("paused-turn", FP) as run:
        assert [w.code for w in run.warnings] == ["paused_turn"]
