"""Connecting the JetStream store: reach a server with the configured options, then bind the
stream and learn what it allows.

A failure is told apart by what the operator must do: ``NatsConfigError`` (credentials or TLS
rejected, a server too old, an unsafe or missing stream: change the configuration) or plain
``BackendUnavailable`` (nothing answers: start or reach the server). Every wait is bounded:
nats-py can wait forever on a TLS handshake that fails verification, so the whole connect
runs under one deadline.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors

from journald.core.errors import BackendUnavailable
from journald.storage.jetstream.config import (
    ATOMIC_SERVER,
    RECORD_FLOOR,
    Cli,
    NatsConfigError,
    Problem,
    StreamConfigError,
    check_stream_config,
    config_problems,
    stream_add_command,
    subject_prefix,
)
from journald.storage.jetstream.errors import answered_or_unavailable, no_answer
from journald.storage.jetstream.options import NatsOptions

T = TypeVar("T")
log = logging.getLogger("journald.storage")
MIN_SERVER = (2, 11, 0)
JS_TEMPORARILY_UNAVAILABLE = 10008
"""``JetStream system temporarily unavailable``: what a request gets while leaders are elected."""
CONNECT_SLACK_S = 5.0
_AUTH_WORDS = ("authorization violation", "authentication", "user authentication expired")


def split_servers(url: str | Sequence[str]) -> list[str]:
    raw = url.split(",") if isinstance(url, str) else list(url)
    return [u.strip() for u in raw if u.strip()]


def _version_tuple(v: Any) -> tuple[int, int, int]:
    try:
        return int(v.major), int(v.minor), int(v.patch)
    except (AttributeError, TypeError, ValueError):
        return (0, 0, 0)


def _kind(err: BaseException) -> str:
    """``auth`` or ``tls`` for an error retrying cannot cure, else ``""``."""
    text = str(err).lower()
    if isinstance(err, nats.errors.AuthorizationError) or any(w in text for w in _AUTH_WORDS):
        return "auth"
    tls_errors = (
        ssl.SSLError,
        nats.errors.SecureConnRequiredError,
        nats.errors.SecureConnFailedError,
    )
    if isinstance(err, tls_errors):
        return "tls"
    return ""


def _refusal(where: str, exc: BaseException, seen: Sequence[BaseException]) -> BackendUnavailable:
    """The error for a failed connect, from the exception and what nats-py reported on the way."""
    every = [*seen, exc]
    for err in every:
        if _kind(err) == "auth":
            return NatsConfigError(
                f"nats-server at {where} refused journald's credentials ({err}); check "
                "--nats-creds, or --nats-user with $JOURNALD_NATS_PASSWORD, or "
                "$JOURNALD_NATS_TOKEN",
                metadata={"url": where},
            )
    for err in every:
        if _kind(err) == "tls":
            return NatsConfigError(
                f"TLS with nats-server at {where} failed ({err}); pass the CA that signed the "
                "server's certificate with --nats-tls-ca, and --nats-tls-cert/--nats-tls-key "
                "when the server verifies clients",
                metadata={"url": where},
            )
    detail = str(exc) or type(exc).__name__
    return BackendUnavailable(
        f"cannot connect to NATS at {where}: {detail}; check that nats-server is running and "
        "reachable from this host",
        metadata={"url": where},
    )


async def open_connection(
    servers: list[str],
    options: NatsOptions,
    *,
    connect_timeout_s: float,
    connect_attempts: int,
    reconnect_time_wait_s: float,
    extra: dict[str, Any],
) -> Any:
    """A connected nats-py client, or ``NatsConfigError`` / ``BackendUnavailable``.

    Rejected credentials or a failed TLS check end the attempt at once (the same settings
    would fail again; nats-py would retry a failed TLS verification until the deadline)."""
    where = ", ".join(servers)
    seen: collections.deque[BaseException] = collections.deque(maxlen=8)
    fatal = asyncio.Event()

    async def remember(exc: Exception) -> None:
        seen.append(exc)
        if _kind(exc):
            fatal.set()

    opts: dict[str, Any] = {
        "servers": servers,
        "connect_timeout": connect_timeout_s,
        "max_reconnect_attempts": connect_attempts,
        "reconnect_time_wait": reconnect_time_wait_s,
        "error_cb": remember,
        **options.connect_kwargs(),
        **extra,
    }
    deadline_s = (
        (connect_timeout_s + reconnect_time_wait_s) * (max(connect_attempts, 0) + 1)
    ) * len(servers) + CONNECT_SLACK_S
    connecting = asyncio.ensure_future(nats.connect(**opts))
    refused = asyncio.ensure_future(fatal.wait())
    try:
        await asyncio.wait(
            {connecting, refused}, timeout=deadline_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        refused.cancel()
    if connecting.done():
        try:
            return connecting.result()
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise _refusal(where, exc, list(seen)) from exc
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    last = seen[-1] if seen else TimeoutError(f"no connection within {deadline_s:g}s")
    raise _refusal(where, last, list(seen))


async def answered(what: str, where: str, op: Callable[[], Awaitable[T]], wait_s: float) -> T:
    """``op()`` (a JetStream API request), retried for up to ``wait_s`` while it goes
    unanswered: right after a node of a cluster is lost the survivors elect new leaders for
    the stream and its buckets, and until then their requests time out. One WARNING line says
    what start-up waits for; past ``wait_s`` it is ``no_answer`` (``serve`` exits 5)."""
    deadline = time.monotonic() + wait_s
    delay = 0.25
    told = False
    while True:
        try:
            try:
                return await op()
            except nats.js.errors.ServiceUnavailableError as exc:
                if getattr(exc, "err_code", None) != JS_TEMPORARILY_UNAVAILABLE:
                    raise
                raise TimeoutError(str(exc)) from exc  # mid-election: no leader to answer
        except (TimeoutError, nats.errors.TimeoutError) as exc:
            if time.monotonic() + delay > deadline:
                raise no_answer(where, what, exc) from exc
            if not told:
                told = True
                log.warning(
                    "NATS at %s did not answer %s (%s); waiting up to %gs for a leader "
                    "(a cluster that lost a node elects new ones)",
                    where,
                    what,
                    type(exc).__name__,
                    wait_s,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


@dataclass
class Binding:
    """What the store learned about its stream."""

    prefix: str
    max_payload: int
    atomic: bool
    consumer_reads: bool
    """Ordered consumers are safe (retention ``limits``); otherwise reads use message gets,
    which never consume anything."""
    unsafe: list[Problem] = field(default_factory=list)
    """Config problems tolerated because the store was opened read-only."""
    replicas: int = 1


async def bind_stream(
    nc: Any,
    stream: str,
    where: str,
    cli: Cli,
    *,
    ack_timeout_s: float,
    read_only: bool,
    add_prefix_hint: str,
    leader_wait_s: float = 0.0,
) -> Binding:
    version = _version_tuple(nc.connected_server_version)
    if version < MIN_SERVER:
        need = ".".join(map(str, MIN_SERVER))
        raise NatsConfigError(
            f"nats-server at {where} is {'.'.join(map(str, version))}; journald's append "
            f"fence needs Nats-Expected-Last-Subject-Sequence-Subject (nats-server >= {need}); "
            "upgrade the server",
            metadata={"url": where},
        )
    atomic_server = version >= ATOMIC_SERVER
    jsm = nc.jsm(timeout=ack_timeout_s)
    with answered_or_unavailable(where, f"the stream info request for {stream}"):
        try:
            info = await answered(
                f"the stream info request for {stream}",
                where,
                lambda: jsm.stream_info(stream),
                leader_wait_s,
            )
        except nats.js.errors.NotFoundError as exc:  # absent: configuration, with its fix
            raise StreamConfigError(
                f"stream {stream} does not exist on {where}; journald never creates one (the "
                "operator owns durability)",
                [stream_add_command(stream, add_prefix_hint, cli=cli, atomic=atomic_server)],
                note=cli.secrets_note,
                metadata={"stream": stream, "url": where},
            ) from exc
        except nats.js.errors.ServiceUnavailableError as exc:  # answered: JetStream is off
            raise NatsConfigError(
                f"JetStream is not available at {where} ({exc}); enable it in the server "
                "config (`jetstream { sync_interval: always }`) or for this account",
                metadata={"url": where},
            ) from exc
    cfg = info.config
    retention = str(getattr(cfg.retention, "value", cfg.retention) or "limits")
    unsafe: list[Problem] = []
    if read_only:
        prefix = subject_prefix(stream, cfg.subjects, cli)
        unsafe = config_problems(cfg)
    else:
        adds: list[str] = []
        if any(not p.edit_flags for p in config_problems(cfg)):  # the route recreates it
            # imported here: the bucket module builds on this one's connection helpers
            from journald.storage.jetstream.buckets import absent_bucket_adds

            replicas = int(getattr(cfg, "num_replicas", 1) or 1)
            adds = await absent_bucket_adds(jsm, stream, replicas, where, cli)
        prefix = check_stream_config(
            stream,
            cfg,
            cli=cli,
            messages=int(info.state.messages or 0),
            atomic=atomic_server,
            bucket_adds=adds,
        )
    limit = int(nc.max_payload)
    mms = cfg.max_msg_size
    if mms is not None and mms > 0:
        limit = min(limit, int(mms))
    if limit < RECORD_FLOOR and not read_only:
        raise NatsConfigError(
            f"nats-server at {where} accepts payloads of {limit} bytes, below journald's "
            f"record floor of {RECORD_FLOOR} bytes; set `max_payload: 1MB` (or more) in the "
            "server config",
            metadata={"url": where},
        )
    return Binding(
        prefix,
        limit,
        atomic=bool(getattr(cfg, "allow_atomic", False)),
        consumer_reads=retention == "limits",
        unsafe=unsafe,
        replicas=int(cfg.num_replicas or 1),
    )
