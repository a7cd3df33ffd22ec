"""Fair shares: the bounds that keep one client from starving or exhausting the others
(docs/design.md#fair-shares, docs/protocol.md#fair-shares).

* **Who is a peer** is decided here and nowhere else (``peer_key``). gRPC Python hands the
  servicer no credentials of a unix-socket peer (``context.peer()`` is ``unix:`` for every
  connection). A shared socket serves each uid on a gRPC server of its own
  (``journald.server.peers``), which names the uid (``owners.PEER_UID``): there a peer is
  a uid. On a private socket (0600: one uid) every caller is one peer.
* **Per-peer budgets** (``PeerBudget``): concurrent calls (lease streams apart), leases and
  bytes of appends in flight. A call over a budget is refused at once with
  ``resource_exhausted`` naming the limit and the flag that raises it; a refusal holds
  nothing.
* **Connections** are bounded by gRPC core (``server_options``): a cap on open connections
  kept well below the descriptor limit (so a flood of idle connections can no longer take the
  descriptors an Open needs), a handshake timeout for connections that never speak HTTP/2, an
  idle timeout for connections without calls, and a maximum connection age with a grace
  period: the one bound gRPC has on a stream whose request never completes (a body shorter
  than its length prefix, half a prefix then end-of-stream: gRPC never hands such a call to
  the servicer, and never answers it).
"""

from __future__ import annotations

import argparse
import contextlib
import resource
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from journald.core.errors import limit_reached
from journald.server.owners import PEER_UID
from journald.storage.io_pool import DEFAULT_READ_THREADS

MiB = 1024 * 1024
MAX_DEFAULT_CONNECTIONS = 1024
"""The default connection cap: a quarter of the descriptor limit, at least 64, at most this."""
FDS_RESERVED = 256
"""Descriptors the default lease budget leaves to the daemon itself (its own files, the
connections in use); each lease holds two of the rest."""


@dataclass(frozen=True)
class FairShares:
    """The daemon's bounds (each a ``journald serve`` flag, named in its refusals)."""

    max_connections: int = 0
    """Open connections at once (0: a quarter of the descriptor limit, 64 to 1,024)."""
    handshake_timeout_s: float = 10.0
    """A connection that has not finished its HTTP/2 preface by then is closed."""
    connection_idle_s: float = 300.0
    """A connection without a call for this long is closed (clients reconnect on demand)."""
    max_connection_age_s: float = 3600.0
    """After this, a connection is asked to go away (GOAWAY; new calls use a new one)..."""
    connection_age_grace_s: float = 60.0
    """...and closed this much later with whatever it still holds: the bound on a stream
    whose request never completes. A lease stream cut there ends like a daemon restart; the
    Python client reopens it (docs/protocol.md#fair-shares)."""
    max_calls_per_peer: int = 1024
    """Calls of one peer in progress at once, long-lived streams apart."""
    max_streams_per_peer: int = 0
    """Long-lived streams (Open, Leases, AppendStream, Watch, ListChanges) of one peer at once
    (0: three per lease the peer may hold)."""
    max_leases_per_peer: int = 0
    """Leases one peer holds at once (0: two descriptors each of the descriptor limit but
    ``FDS_RESERVED``): a typed refusal before the descriptors run out."""
    max_inflight_bytes_per_peer: int = 256 * MiB
    """Bytes of one peer's appends received and not yet acknowledged, and of its chunked
    imports received and not yet stored (ImportCheckpointChunks buffers an import whole)."""
    watch_buffer_bytes: int = 16 * MiB
    """Bytes of records a Watch may fall behind the appends before it is cut."""
    read_threads: int = DEFAULT_READ_THREADS
    """Threads of the background class (Verify, Load, History, export, lease closes)."""

    def resolved(self, nofile: int | None = None) -> FairShares:
        """The zero defaults worked out from the descriptor limit (``RLIMIT_NOFILE``)."""
        if nofile is None:
            nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        conns = self.max_connections or min(MAX_DEFAULT_CONNECTIONS, max(64, nofile // 4))
        leases = self.max_leases_per_peer or max(16, (nofile - FDS_RESERVED) // 2)
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        streams = self.max_streams_per_peer or 3 * leases
        values.update(
            max_connections=conns, max_leases_per_peer=leases, max_streams_per_peer=streams
        )
        return FairShares(**values)


FLAGS = {
    "max_connections": "--max-connections",
    "handshake_timeout_s": "--handshake-timeout-s",
    "connection_idle_s": "--connection-idle-s",
    "max_connection_age_s": "--max-connection-age-s",
    "connection_age_grace_s": "--connection-age-grace-s",
    "max_calls_per_peer": "--max-calls-per-peer",
    "max_streams_per_peer": "--max-streams-per-peer",
    "max_leases_per_peer": "--max-leases-per-peer",
    "max_inflight_bytes_per_peer": "--max-inflight-bytes-per-peer",
    "watch_buffer_bytes": "--watch-buffer-bytes",
    "read_threads": "--read-threads",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``journald serve`` flags of the fair shares, with their defaults."""
    d = FairShares()
    g = p.add_argument_group("fair shares (docs/protocol.md#fair-shares)")
    for name, flag in FLAGS.items():
        default = getattr(d, name)
        g.add_argument(
            flag, type=type(default), default=default, help=f"{_HELP[name]} (default {default})"
        )


_HELP = {
    "max_connections": "open connections at once; 0: a quarter of the descriptor limit (64-1024)",
    "handshake_timeout_s": "seconds a new connection has to speak HTTP/2",
    "connection_idle_s": "seconds a connection without calls stays open",
    "max_connection_age_s": "seconds before a connection is asked to go away (0: never)",
    "connection_age_grace_s": "seconds a connection asked to go away keeps its calls",
    "max_calls_per_peer": "calls of one peer at once, long-lived streams apart",
    "max_streams_per_peer": "Open, Leases, AppendStream, Watch, ListChanges streams; 0: 3 a lease",
    "max_leases_per_peer": "leases of one peer at once; 0: two descriptors each, 256 spared",
    "max_inflight_bytes_per_peer": "bytes of one peer's appends and imports not yet answered",
    "watch_buffer_bytes": "bytes a Watch may fall behind before it is cut",
    "read_threads": "threads for reads and lease closes, apart from Opens and appends",
}


def from_args(args: argparse.Namespace) -> FairShares:
    return FairShares(**{name: getattr(args, name) for name in FLAGS})


def server_options(shares: FairShares) -> list[tuple[str, Any]]:
    """The gRPC core options that bound connections (``shares`` resolved)."""
    opts: list[tuple[str, Any]] = [
        ("grpc.max_allowed_incoming_connections", shares.max_connections),
        ("grpc.server_handshake_timeout_ms", int(shares.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(shares.connection_idle_s * 1000)),
    ]
    if shares.max_connection_age_s > 0:
        opts += [
            ("grpc.max_connection_age_ms", int(shares.max_connection_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(shares.connection_age_grace_s * 1000)),
        ]
    return opts


LONG_LIVED = frozenset({"Open", "Leases", "AppendStream", "Watch", "ListChanges"})
"""RPCs counted as streams (``max_streams_per_peer``), not as calls."""
BACKGROUND_RPCS = frozenset(
    {"Verify", "Load", "History", "Watch", "ExportCheckpoint", "ExportCheckpointChunks"}
)
"""RPCs whose blocking reads run in the background class (``io_pool.background``)."""


def call_budget(
    budget: PeerBudget, context: Any, method: str
) -> contextlib.AbstractContextManager[None]:
    """What one call of ``method`` holds of its peer's budget while it runs."""
    if method in LONG_LIVED:
        return budget.take(
            peer_key(context),
            "max_streams_per_peer",
            1,
            f"a {method} stream",
            "end streams you no longer read (leases you no longer write, Watches)",
        )
    return budget.take(
        peer_key(context),
        "max_calls_per_peer",
        1,
        f"a {method} call",
        "wait for the calls in progress to finish instead of sending more at once",
    )


def peer_key(context: Any) -> str:
    """The one definition of "the peer" a budget is counted for (see the module doc): the
    uid of a shared socket's per-uid server (``owners.PEER_UID``, set by the edge), else the
    transport's peer, which for a private unix socket is every caller alike."""
    uid = PEER_UID.get()
    if uid is not None:
        return f"uid {uid}"
    peer = str(context.peer() or "")
    return "local" if peer in ("", "unix:") else peer


class PeerBudget:
    """Counts per peer of what the per-peer limits bound; ``take`` refuses past a limit."""

    def __init__(self, shares: FairShares) -> None:
        self.shares = shares
        self._used: dict[tuple[str, str], int] = {}

    def used(self, peer: str, limit: str) -> int:
        return self._used.get((peer, limit), 0)

    def take(
        self, peer: str, limit: str, amount: int, what: str | Callable[[], str], advice: str
    ) -> Held:
        """Hold ``amount`` of ``limit`` (a ``FairShares`` field) for ``peer`` until the
        returned hold is exited (``with``); ``resource_exhausted`` when it would go past the
        limit (nothing held then). ``what`` names the request in that refusal (a callable:
        built only then, not on every call of the hot path)."""
        key = (peer, limit)
        cap = getattr(self.shares, limit)
        now = self._used.get(key, 0)
        if now + amount > cap and now > 0:  # one item over the cap alone still passes
            named = what() if callable(what) else what
            raise limit_reached(named, limit, cap, FLAGS[limit], advice, peer=peer, used=now)
        self._used[key] = now + amount
        return Held(self._used, key, amount)


class Held:
    """What one ``PeerBudget.take`` holds, given back once on exit (a plain class rather than
    a generator context manager: two of these are taken on every append)."""

    __slots__ = ("_amount", "_key", "_used")

    def __init__(self, used: dict[tuple[str, str], int], key: tuple[str, str], amount: int):
        self._used, self._key, self._amount = used, key, amount

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self._amount:
            left = self._used[self._key] - self._amount
            self._amount = 0  # given back once, however often exited
            if left:
                self._used[self._key] = left
            else:
                del self._used[self._key]
