"""The JetStream backend's one translation of nats-py exceptions into journald's error tree.

Every NATS call of the backend that can fail for a reason the caller must be told about runs
under :func:`nats_errors` (or the retry loops built on :data:`TRANSIENT`), so a nats-py
exception never reaches the server: it becomes ``BackendUnavailable`` or ``StorageFull``
(``journald.core.errors``) here, with a message naming what failed and what to do. What the
JetStream modules still catch themselves is control flow (a key that is not found is absent,
a fence refused is a conflict to resolve), not translation.
"""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors

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
