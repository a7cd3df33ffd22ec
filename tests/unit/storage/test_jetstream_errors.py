"""The JetStream backend's one translation point (``journald.storage.jetstream.errors``):
what a nats-py exception becomes, so that none reaches the server untyped."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from journald.core.errors import BackendUnavailable, StorageFull
from journald.storage.jetstream.errors import Scope, appending, retried


def refusal(description: str, err_code: int = 10047) -> nats.js.errors.APIError:
    return nats.js.errors.APIError(code=400, err_code=err_code, description=description)


def test_a_stream_refusing_for_its_limits_is_storage_full_naming_the_fix() -> None:
    scope = Scope.stream("RUNS")
    full = pytest.raises(StorageFull, match=r"refused appending: maximum messages exceeded; raise")
    with full, scope.translated("appending"):
        raise refusal("maximum messages exceeded")
    # a bucket counts only bytes: the same answer there is not taken for a full disk
    unavailable = pytest.raises(BackendUnavailable, match="JetStream bucket B: writing x failed")
    with unavailable, Scope.bucket("B").translated("writing x"):
        raise refusal("maximum messages exceeded")


def test_any_other_nats_failure_is_backend_unavailable_with_the_stream_in_its_metadata() -> None:
    with pytest.raises(BackendUnavailable) as err, Scope.stream("RUNS").translated("reading a.b"):
        raise nats.errors.NoServersError()
    assert err.value.metadata["stream"] == "RUNS"
    assert "JetStream stream RUNS: reading a.b failed" in err.value.message


async def test_transient_failures_are_retried_then_name_what_failed_and_for_how_long() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise nats.errors.TimeoutError()
        return "answered"

    scope = Scope.stream("RUNS")
    assert await scope.retrying("reading x", flaky, 5.0, lambda: False) == "answered"
    assert calls == 3

    async def silent() -> str:
        raise nats.errors.ConnectionReconnectingError()

    with pytest.raises(BackendUnavailable, match=r"reading x failed \(Connection.*for 0.1s"):
        await scope.retrying("reading x", silent, 0.1, lambda: False)


async def test_a_refusal_with_an_answer_is_not_retried() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise nats.js.errors.NotFoundError()

    with pytest.raises(nats.js.errors.NotFoundError):  # the caller's control flow: absent
        await retried(
            refused,
            window_s=5.0,
            closed=lambda: False,
            gave_up=lambda exc: BackendUnavailable(f"gave up: {exc!r}"),
        )
    assert calls == 1


def test_a_publish_that_failed_without_an_answer_says_the_record_is_in_doubt() -> None:
    doubt = pytest.raises(BackendUnavailable, match="may or may not be stored: retry the append")
    with doubt, appending(Scope.stream("RUNS"), "run-1", 7):
        raise nats.errors.NoServersError()
