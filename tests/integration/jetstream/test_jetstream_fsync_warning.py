"""At start-up the daemon warns when a nats-server does not fsync every JetStream write.

Real nats-servers with and without `sync_interval: always`; the daemon learns the policy from
the server's monitoring endpoint (`--nats-monitor-url`), or through the system `varz` request
when its account imports that service, and says so in its log (stderr, as journalctl shows
it). When it can learn nothing it warns that it could not verify, and how to check by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tests.daemon import Daemon
from tests.nats_server import NatsServer, create_stream, free_port

NOT_ALWAYS = "does not fsync every JetStream write"
UNVERIFIED = "cannot verify that the nats-server(s)"
STREAM = "JOURNALD"

VARZ = "$SYS.REQ.SERVER.PING.VARZ"
IMPORTS_VARZ = [
    "accounts {",
    f'  SYS {{ users [{{user: sys, password: sys}}], exports [{{service: "{VARZ}"}}] }}',
    "  APP {",
    "    jetstream: enabled",
    "    users [{user: app, password: app}]",
    f'    imports [{{service: {{account: SYS, subject: "{VARZ}"}}}}]',
    "  }",
    "}",
    "system_account: SYS",
]


def start(start_nats: Callable[..., NatsServer], **fields: object) -> NatsServer:
    server = start_nats(**fields)
    connect = {"user": "app", "password": "app"} if fields.get("extra_config") else {}
    asyncio.run(create_stream(server.url, STREAM, "journald", connect=connect))
    return server


def daemon_log(tmp_path: Path, url: str, *flags: str, env: dict[str, str] | None = None) -> str:
    (tmp_path / "d").mkdir()
    with Daemon(tmp_path / "d", "jetstream", "--nats-url", url, *flags, env=env) as daemon:
        return daemon.log()


def test_a_server_without_sync_always_is_named_in_a_warning(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start(start_nats, sync_always=False, http_port=free_port())
    log = daemon_log(tmp_path, server.url, "--nats-monitor-url", server.monitor_url)
    assert NOT_ALWAYS in log, log
    assert f"nats-server {server.name} " in log
    assert "sync_interval 120s" in log
    assert "sync_interval: always" in log  # the fix
    assert UNVERIFIED not in log


def test_a_server_with_sync_always_gets_no_warning(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start(start_nats, sync_always=True, http_port=free_port())
    log = daemon_log(tmp_path, server.url, "--nats-monitor-url", server.monitor_url)
    assert NOT_ALWAYS not in log, log
    assert UNVERIFIED not in log, log
    assert "WARNING" not in log, log


def test_an_account_importing_the_system_varz_request_needs_no_monitoring_port(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start(start_nats, sync_always=False, extra_config=IMPORTS_VARZ)
    log = daemon_log(
        tmp_path,
        server.url,
        "--nats-user",
        "app",
        env={"JOURNALD_NATS_PASSWORD": "app"},
    )
    assert NOT_ALWAYS in log, log
    assert VARZ in log


def test_when_nothing_can_tell_the_daemon_warns_that_it_could_not_verify(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start(start_nats, sync_always=True)
    log = daemon_log(tmp_path, server.url)
    assert UNVERIFIED in log, log
    assert "--nats-monitor-url" in log
    assert NOT_ALWAYS not in log
