"""The JetStream backend's one translation of nats-py exceptions into journald's error tree.

Every NATS call of the backend runs under one of these, so a nats-py exception never reaches
the server: it becomes ``BackendUnavailable`` or ``StorageFull`` (``journald.core.errors``)
here, with a message naming what failed and what to do, the way httpx maps its transport's
exceptions in one context manager.

* ``Scope`` (a stream or a bucket, named as its errors name it): ``translated`` maps what a
  call raised, ``retrying`` runs an idempotent call through transient failures for a bounded
  time first.
* ``answered_or_unavailable``: a request made while binding (stream, bucket and lease-bucket
  info) that got no answer is ``no_answer``: the servers are unhealthy, not misconfigured.

What the JetStream modules still catch themselves is control flow, not translation: a key or
message that is not found is absent, a fence refused (``WRONG_LAST_SEQUENCE``) is a conflict
to resolve or a revision to read again, a failed atomic batch falls back to single publishes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import nats.js.errors

from journald.core.errors import BackendUnavailable, JournaldError, StorageFull

T = TypeVar("T")

TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
    ConnectionError,
)
"""Failures that may pass on their own (no answer, a reconnect, a leader being elected): an
idempotent operation retries them for a bounded time."""

BATCH_FAILURES: tuple[type[BaseException], ...] = (*TRANSIENT, nats.errors.Error)
"""Any failure of an atomic batch publish, after which the per-record path runs instead."""

UNANSWERED: tuple[type[BaseException], ...] = (TimeoutError, nats.errors.Error, OSError)
"""What a request that got no usable answer raises (a refusal with an answer is an
``APIError``, a subclass: callers that read answers test for it first)."""


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT)


def is_unanswered(exc: BaseException) -> bool:
    """No answer, or JetStream unavailable for now (a leader election); an ``APIError``
    carrying any other answer (a compare-and-set refused) is the caller's to read."""
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True
    return isinstance(exc, UNANSWERED) and not isinstance(exc, nats.js.errors.APIError)


async def retried(
    op: Callable[[], Awaitable[T]],
    *,
    window_s: float,
    closed: Callable[[], bool],
    gave_up: Callable[[BaseException], JournaldError],
    retry: Callable[[BaseException], bool] = is_transient,
    max_delay_s: float = 1.0,
) -> T:
    """``op()``, retried with backoff while what it raises is ``retry``-able, for up to
    ``window_s`` (or until the connection is ``closed``); then ``gave_up(last failure)``.
    Anything else it raises propagates unchanged."""
    deadline = time.monotonic() + window_s
    delay = 0.05
    while True:
        try:
            return await op()
        except Exception as exc:
            if not retry(exc):
                raise
            if time.monotonic() + delay >= deadline or closed():
                raise gave_up(exc) from exc
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)


def _description(exc: BaseException) -> str:
    return str(getattr(exc, "description", "") or exc)


@dataclass(frozen=True, slots=True)
class Scope:
    """A stream or an Object Store bucket, as the errors of the calls made on it name it."""

    label: str
    """``JetStream stream NAME`` or ``JetStream bucket NAME``."""
    metadata: dict[str, Any]
    full_hint: str
    """How to make room when the server refuses for its limits."""
    full_on_messages: bool
    """Whether a refusal for the number of messages is ``StorageFull`` too (a stream: yes)."""
    retry_hint: str = ""
    """Appended to the retry advice of a call that got no answer within its window."""
    err_code_metadata: bool = False
    """Whether a refusal's metadata names the server's ``err_code``."""

    @classmethod
    def stream(cls, name: str) -> Scope:
        return cls(
            f"JetStream stream {name}",
            {"stream": name},
            "raise the stream's limits (`nats stream edit`) or delete old runs",
            full_on_messages=True,
            retry_hint=" (an append may be retried at the same seq)",
            err_code_metadata=True,
        )

    @classmethod
    def bucket(cls, name: str) -> Scope:
        return cls(
            f"JetStream bucket {name}",
            {"bucket": name},
            f"raise its limits (`nats object edit {name} --max-bucket-size ...`) or delete "
            "old runs",
            full_on_messages=False,
        )

    def api_error(self, what: str, exc: BaseException) -> JournaldError:
        """A refusal the server answered: its limits (``StorageFull``) or anything else."""
        desc = _description(exc)
        counted = "bytes" in desc or (self.full_on_messages and "messages" in desc)
        if ("maximum" in desc and counted) or "storage" in desc:
            return StorageFull(
                f"{self.label} refused {what}: {desc}; {self.full_hint}",
                metadata=dict(self.metadata),
            )
        meta = dict(self.metadata)
        if self.err_code_metadata:
            meta["err_code"] = getattr(exc, "err_code", "")
        return BackendUnavailable(f"{self.label}: {what} failed: {desc}", metadata=meta)

    def failed(self, what: str, exc: BaseException) -> BackendUnavailable:
        """A NATS failure without a server's answer (not transient, or no longer retried)."""
        return BackendUnavailable(
            f"{self.label}: {what} failed: {exc}", metadata=dict(self.metadata)
        )

    def gave_up(self, what: str, window_s: float) -> Callable[[BaseException], JournaldError]:
        def error(exc: BaseException) -> JournaldError:
            return BackendUnavailable(
                f"{self.label}: {what} failed ({type(exc).__name__}) for {window_s:g}s; "
                f"check the NATS servers and retry{self.retry_hint}",
                metadata=dict(self.metadata),
            )

        return error

    @contextmanager
    def translated(
        self,
        what: str,
        *,
        refusals: tuple[type[BaseException], ...] = (nats.js.errors.APIError,),
        failures: tuple[type[BaseException], ...] = (nats.errors.Error,),
    ) -> Iterator[None]:
        """Run a call of ``what``: a server's refusal (``refusals``) becomes ``api_error``,
        another NATS failure (``failures``) ``failed``."""
        try:
            yield
        except refusals as exc:
            raise self.api_error(what, exc) from exc
        except failures as exc:
            raise self.failed(what, exc) from exc

    @contextmanager
    def stalls(self, what: str) -> Iterator[None]:
        """Run a wait for the next message of a read: no answer in time is a stalled read."""
        try:
            yield
        except TRANSIENT as exc:
            raise BackendUnavailable(
                f"{self.label}: {what} stalled ({type(exc).__name__}); retry when the "
                "servers are healthy",
                metadata=dict(self.metadata),
            ) from exc

    async def retrying(
        self,
        what: str,
        op: Callable[[], Awaitable[T]],
        window_s: float,
        closed: Callable[[], bool],
        *,
        translate: bool = True,
    ) -> T:
        """``op()`` retried through transient failures (``retried``); with ``translate``,
        what else it raises is ``translated`` too."""
        call = retried(op, window_s=window_s, closed=closed, gave_up=self.gave_up(what, window_s))
        if not translate:
            return await call
        with self.translated(what):
            return await call


@contextmanager
def appending(scope: Scope, run_id: str, seq: int) -> Iterator[None]:
    """Run the publish of the record at ``seq``: a refusal is ``scope.api_error``; another
    failure leaves the record in doubt, which the message says (retry at the same seq)."""
    try:
        yield
    except nats.js.errors.APIError as exc:
        raise scope.api_error(f"appending seq {seq} of run {run_id}", exc) from exc
    except nats.errors.Error as exc:
        raise BackendUnavailable(
            f"run {run_id}: appending seq {seq} failed: {exc}; the record may or may not be "
            "stored: retry the append at the same seq",
            metadata={"run_id": run_id, "seq": seq},
        ) from exc


def no_answer(where: str, request: str, exc: BaseException) -> BackendUnavailable:
    """A request at bind time that got no answer: the servers are unhealthy, not misconfigured."""
    return BackendUnavailable(
        f"NATS at {where} did not answer {request} ({type(exc).__name__}); retry when the "
        "server is healthy",
        metadata={"url": where},
    )


@contextmanager
def answered_or_unavailable(where: str, request: str) -> Iterator[None]:
    """Run a bind-time ``request``: no usable answer is ``no_answer`` (``serve`` exits 5).
    A refusal the caller reads (``NotFoundError``: missing) is caught inside, before it."""
    try:
        yield
    except UNANSWERED as exc:
        raise no_answer(where, request, exc) from exc
