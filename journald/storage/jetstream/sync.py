"""Does every nats-server fsync each JetStream write? Checked once at start-up, logged.

JetStream acknowledges a publish once the message is in its files; it fsyncs them only every
``sync_interval`` (2 minutes by default) unless the server runs with
``jetstream { sync_interval: always }``. Without it, records journald acknowledged can be lost
in a power cut or kernel crash. The setting is not visible to an ordinary client: neither the
server's INFO nor ``$JS.API.INFO`` carries it. It is in the server's ``varz``
(``jetstream.config.sync_always``), which journald reads from

1. ``$SYS.REQ.SERVER.PING.VARZ`` on its own connection: answered (by every server of a
   cluster) only when the connection's account may make system requests (the system account
   itself cannot hold streams, so this needs an account that imports that service);
2. the monitoring endpoints given with ``--nats-monitor-url`` (``http://host:8222/varz``).

A server that does not fsync every write gets a WARNING naming it; when neither source
answers, a WARNING says the policy could not be verified and how to check it by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("journald.jetstream")

VARZ_PING = "$SYS.REQ.SERVER.PING.VARZ"
GATHER_QUIET_S = 0.25
"""A ping gathers one answer per server: stop this long after the last one."""
GATHER_MAX_S = 1.0
HTTP_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class ServerSync:
    server: str
    source: str
    sync_always: bool
    sync_interval_s: float


def _from_varz(varz: Any, source: str) -> ServerSync | None:
    if not isinstance(varz, dict):
        return None
    config = (varz.get("jetstream") or {}).get("config")
    if not isinstance(config, dict):
        return None
    name = str(varz.get("server_name") or varz.get("server_id") or "?")
    interval_ns = config.get("sync_interval") or 0
    return ServerSync(name, source, bool(config.get("sync_always")), float(interval_ns) / 1e9)


async def _ping_varz(nc: Any) -> list[ServerSync]:
    """Every server's varz through the system request subject (empty when not permitted)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    found: list[ServerSync] = []
    try:
        await nc.publish(VARZ_PING, b"", reply=inbox)
        deadline = time.monotonic() + GATHER_MAX_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=min(left, GATHER_QUIET_S))
            except Exception:  # nats-py's timeout: no further answer
                break
            if (msg.headers or {}).get("Status") == "503":  # no responders
                break
            with contextlib.suppress(ValueError):
                body = json.loads(msg.data)
                got = _from_varz(body.get("data"), VARZ_PING)
                if got is not None:
                    found.append(got)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


def _http_varz(base: str) -> ServerSync | None:
    url = base.rstrip("/") + "/varz"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        log.warning(
            "cannot read %s (%s): the nats-server's fsync policy is not verified there", url, exc
        )
        return None
    got = _from_varz(body, url)
    if got is None:
        log.warning("%s has no JetStream config: is JetStream enabled on that server?", url)
    return got


async def read_fsync_policy(nc: Any, monitor_urls: Sequence[str]) -> list[ServerSync]:
    """What each reachable server says about its fsync policy (may be empty)."""
    found: dict[str, ServerSync] = {}
    try:
        for s in await _ping_varz(nc):
            found.setdefault(s.server, s)
    except Exception as exc:  # a diagnostic must never stop the start
        log.debug("system varz request failed: %s", exc)
    for base in monitor_urls:
        got = await asyncio.to_thread(_http_varz, base)
        if got is not None:
            found.setdefault(got.server, got)
    return list(found.values())


def report_fsync_policy(servers: Sequence[ServerSync], where: str) -> None:
    """Log one line per server: WARNING when it does not fsync every write, and a WARNING
    when no server could be asked."""
    if not servers:
        log.warning(
            "cannot verify that the nats-server(s) at %s fsync every JetStream write: the "
            "policy is readable only through a system-account request or the monitoring port. "
            "Without `jetstream { sync_interval: always }` acknowledged records can be lost in "
            'a power cut. Check that `curl -s http://HOST:8222/varz` shows "sync_always": true '
            "and pass --nats-monitor-url http://HOST:8222 so journald checks it at start-up",
            where,
        )
        return
    for s in servers:
        if s.sync_always:
            log.info("nats-server %s fsyncs every JetStream write (via %s)", s.server, s.source)
        else:
            log.warning(
                "nats-server %s does not fsync every JetStream write (sync_interval %gs, not "
                "always; read from %s): records journald acknowledged within that interval "
                "can be lost in a power cut or kernel crash; set `jetstream { sync_interval: "
                "always }` in its config (deploy/nats/README.md)",
                s.server,
                s.sync_interval_s,
                s.source,
            )


async def check_fsync_policy(nc: Any, monitor_urls: Sequence[str], where: str) -> None:
    report_fsync_policy(await read_fsync_policy(nc, monitor_urls), where)
