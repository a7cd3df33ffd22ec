"""`journald serve --backend jetstream` reaches a nats-server that requires credentials or TLS.

Each test starts a real nats-server that refuses clients without one kind of credential
(token, user and password, an operator/account/user JWT chain, TLS, mutual TLS), shows that a
client without it is refused, then starts the real daemon with the matching flag or
environment variable and writes and reads a run through it. A last test names the writer: the
`locked` refusal a host gets at Open for a run held through another names that daemon by its
`--writer-name`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path

import journald_client as jc
import nats
import pytest

from tests.daemon import Daemon
from tests.integration.clientbin.common import FP
from tests.nats_auth import OperatorSetup, make_tls, password_config, token_config
from tests.nats_server import NatsServer, create_stream

STREAM = "JOURNALD"


StartNats = Callable[..., NatsServer]


def start_server(start_nats: StartNats, config: list[str], **connect: object) -> NatsServer:
    """A server with ``config`` appended, holding the journald stream (made with ``connect``)."""
    server = start_nats(extra_config=config)
    asyncio.run(create_stream(server.url, STREAM, "journald", connect=dict(connect)))
    return server


def refused_without(url: str, **connect: object) -> bool:
    """True when a client with only ``connect`` (no journald credentials) is turned away."""

    async def attempt() -> bool:
        async def quiet(_exc: Exception) -> None:
            return None

        try:
            nc = await asyncio.wait_for(
                nats.connect(
                    url,
                    connect_timeout=2,
                    max_reconnect_attempts=1,
                    reconnect_time_wait=0.1,
                    error_cb=quiet,
                    **connect,
                ),
                timeout=3,  # a success takes milliseconds; a failed TLS check may hang
            )
        except (nats.errors.Error, OSError, TimeoutError):
            return True
        await nc.close()
        return False

    return asyncio.run(attempt())


def write_and_read_a_run(tmp_path: Path, url: str, *flags: str, env: dict[str, str]) -> None:
    daemon = Daemon(tmp_path, "jetstream", "--nats-url", url, "--stream", STREAM, *flags, env=env)
    with daemon, jc.connect(str(daemon.socket)) as client:
        run = client.start("secured", FP, "hello over an authenticated connection")
        run.assistant("an answer", stop_reason="end_turn")
        run.terminal("completed")
        assert [r.seq for r in client.load("secured")] == [1, 2, 3]
        assert client.verify("secured").last_seq == 3


def test_a_token_from_the_environment_reaches_a_server_that_requires_it(
    tmp_path: Path, start_nats: StartNats
) -> None:
    server = start_server(start_nats, token_config("t0ken-s3cret"), token="t0ken-s3cret")
    assert refused_without(server.url)
    assert refused_without(server.url, token="wrong")
    write_and_read_a_run(tmp_path, server.url, env={"JOURNALD_NATS_TOKEN": "t0ken-s3cret"})


def test_a_user_and_password_reach_a_server_that_requires_them(
    tmp_path: Path, start_nats: StartNats
) -> None:
    config = password_config("journald", "pa55-word")
    server = start_server(start_nats, config, user="journald", password="pa55-word")
    assert refused_without(server.url)
    assert refused_without(server.url, user="journald", password="wrong")
    write_and_read_a_run(
        tmp_path,
        server.url,
        "--nats-user",
        "journald",
        env={"JOURNALD_NATS_PASSWORD": "pa55-word"},
    )


def test_a_creds_file_reaches_a_server_in_operator_mode(
    tmp_path: Path, start_nats: StartNats
) -> None:
    auth = OperatorSetup(tmp_path / "auth")
    creds = str(auth.creds_path)
    server = start_server(start_nats, auth.server_config(), user_credentials=creds)
    assert refused_without(server.url)
    write_and_read_a_run(tmp_path, server.url, "--nats-creds", creds, env={})


def test_a_private_ca_verifies_a_tls_server(tmp_path: Path, start_nats: StartNats) -> None:
    tls = make_tls(tmp_path / "tls")
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    server = start_server(start_nats, tls.server_config(verify_clients=False), tls=ctx)
    # the system trust store does not know the test CA
    assert refused_without(server.url, tls=ssl.create_default_context())
    write_and_read_a_run(tmp_path, server.url, "--nats-tls-ca", str(tls.ca), env={})


def test_a_client_certificate_reaches_a_server_that_verifies_clients(
    tmp_path: Path, start_nats: StartNats
) -> None:
    tls = make_tls(tmp_path / "tls")
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    ctx.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    server = start_server(start_nats, tls.server_config(verify_clients=True), tls=ctx)
    assert refused_without(server.url, tls=ssl.create_default_context(cafile=str(tls.ca)))
    write_and_read_a_run(
        tmp_path,
        server.url,
        "--nats-tls-ca",
        str(tls.ca),
        "--nats-tls-cert",
        str(tls.client_cert),
        "--nats-tls-key",
        str(tls.client_key),
        env={},
    )


def test_a_host_refused_a_held_run_is_told_the_other_daemon_by_its_writer_name(
    tmp_path: Path, start_nats: StartNats
) -> None:
    server = start_server(start_nats, [])
    flags = ("--nats-url", server.url, "--stream", STREAM)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host_a = Daemon(tmp_path / "a", "jetstream", *flags, "--writer-name", "build-host-a")
    host_b = Daemon(tmp_path / "b", "jetstream", *flags, "--writer-name", "build-host-b")
    with (
        host_a,
        host_b,
        jc.connect(str(host_a.socket)) as client_a,
        jc.connect(str(host_b.socket)) as client_b,
    ):
        run_a = client_a.start("named", FP, "hello")
        run_a.assistant("first answer", stop_reason="end_turn")
        with pytest.raises(jc.Locked) as err:  # held through host A: refused at Open
            client_b.resume("named", FP)
        assert err.value.metadata["holder_writer"] == "build-host-a"
        assert "build-host-a" in err.value.message
