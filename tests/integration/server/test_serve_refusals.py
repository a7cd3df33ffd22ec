"""`journald serve` refuses a start it cannot make with one short paragraph and a distinct exit
code, never a traceback.

Each test runs the real command as a subprocess for one refusal and checks the exit code
(2 configuration, 3 held by another daemon, 5 NATS unreachable; `journald serve --help` lists
them), that stderr is a few lines starting with `journald:` that say what to do, and that no
Python traceback is printed. The stream refusal is followed to the end: its printed fix is run
with the real `nats` CLI and the same command then serves.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon import JOURNALD, Daemon
from tests.nats_auth import make_tls, token_config
from tests.nats_server import NatsServer, create_stream, free_port
from tests.natscli import printed_commands, run_all

pytestmark = pytest.mark.timeout(1800)  # natscli may be built on first use

MAX_LINES = 8


def serve(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    socket: Path | str | None = None,
    data_dir: Path | None = None,
) -> tuple[int, str]:
    """Run `journald serve` to its exit (cwd ``tmp_path``): (exit code, stderr)."""
    sock = socket or f"/tmp/jd-refuse-{os.getpid()}-{abs(hash(str(tmp_path))) % 10**8}/s.sock"
    data = data_dir or tmp_path / "data"
    done = subprocess.run(
        [*JOURNALD, "serve", "--socket", str(sock), "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stderr


def assert_clean(stderr: str, *expected: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert 0 < len(lines) <= MAX_LINES, stderr
    assert lines[0].startswith("journald: "), stderr
    for text in expected:
        assert text in stderr, stderr


@pytest.fixture
def nats_server(start_nats: Callable[..., NatsServer]) -> NatsServer:
    return start_nats()


def test_the_help_lists_each_refusal_exit_code() -> None:
    done = subprocess.run(
        [*JOURNALD, "serve", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    for line in ("exit codes:", "2  refused: bad flags", "3  refused: the data dir", "5  refused"):
        assert line in done.stdout, done.stdout


def test_an_unsafe_stream_is_refused_with_its_fix_which_run_by_natscli_lets_serve_start(
    tmp_path: Path, nats_server: NatsServer, natscli: str
) -> None:
    asyncio.run(create_stream(nats_server.url, "AGED", "aged", max_age=86400.0))
    flags = ("--backend", "jetstream", "--nats-url", nats_server.url, "--stream", "AGED")
    code, err = serve(tmp_path, *flags)
    assert code == 2, err
    assert_clean(err, "stream AGED is not safe for journald: max age is 86400s")
    fixes = printed_commands(err)
    assert fixes == [f"nats --server {nats_server.url} stream edit AGED -f --max-age=0"]
    run_all(fixes, natscli, tmp_path / "home")
    (tmp_path / "after").mkdir()
    with Daemon(tmp_path / "after", "jetstream", *flags[2:]) as daemon:
        assert daemon.proc is not None
        assert daemon.proc.poll() is None  # serving


def test_a_missing_stream_is_refused_with_a_stream_add_line(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    code, err = serve(
        tmp_path, "--backend", "jetstream", "--nats-url", nats_server.url, "--stream", "NONE"
    )
    assert code == 2, err
    assert_clean(err, "stream NONE does not exist", f"  nats --server {nats_server.url} stream add")


def test_unreachable_nats_is_refused_with_exit_5(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    code, err = serve(tmp_path, "--backend", "jetstream", "--nats-url", url)
    assert code == 5, err
    assert_clean(err, f"cannot connect to NATS at {url}", "check that nats-server is running")


def test_rejected_credentials_are_a_configuration_refusal(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    server = start_nats(extra_config=token_config("right"))
    code, err = serve(
        tmp_path,
        "--backend",
        "jetstream",
        "--nats-url",
        server.url,
        env={"JOURNALD_NATS_TOKEN": "wrong"},
    )
    assert code == 2, err
    assert_clean(err, "refused journald's credentials", "JOURNALD_NATS_TOKEN")


def test_a_tls_server_the_system_trust_store_cannot_verify_is_a_configuration_refusal(
    tmp_path: Path, start_nats: Callable[..., NatsServer]
) -> None:
    tls = make_tls(tmp_path / "tls")
    server = start_nats(extra_config=tls.server_config(verify_clients=False))
    code, err = serve(tmp_path, "--backend", "jetstream", "--nats-url", server.url)
    assert code == 2, err
    assert_clean(err, f"TLS with nats-server at {server.url} failed", "--nats-tls-ca")


def test_a_data_dir_held_by_a_running_daemon_is_refused_with_exit_3(tmp_path: Path) -> None:
    with Daemon(tmp_path, "memory") as running:
        code, err = serve(tmp_path, "--backend", "memory")  # same --data-dir, another socket
    assert code == 3, err
    assert_clean(err, "is held by another journald daemon", f"pid {running.pid}", "--data-dir")


def test_a_socket_served_by_a_running_daemon_is_refused_with_exit_3(tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    with Daemon(tmp_path / "first", "memory") as running:
        code, err = serve(
            tmp_path, "--backend", "memory", socket=running.socket, data_dir=tmp_path / "second"
        )
        assert running.proc is not None
        assert running.proc.poll() is None  # the running daemon is left alone
    assert code == 3, err
    assert_clean(err, f"socket {running.socket} is served by another running daemon")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--nats-tls-key", "k.pem"], {}, "--nats-tls-cert and --nats-tls-key go together"),
        (["--nats-user", "me"], {}, "$JOURNALD_NATS_PASSWORD is not"),
        (["--nats-creds", "garbage.creds"], {}, "is not a NATS .creds file"),
        (["--nats-creds", "missing.creds"], {}, "missing.creds: No such file"),
        (["--nats-tls-ca", "garbage.creds"], {}, "cannot load the NATS TLS files"),
        (["--socket-group", "no-such-group-here"], {}, "no such group on this host"),
        (["--nats-monitor-url", "127.0.0.1:8222"], {}, "is not an http(s) URL"),
    ],
)
def test_bad_flags_are_refused_with_exit_2_before_anything_starts(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    (tmp_path / "garbage.creds").write_text("not a creds file\n")  # relative to serve's cwd
    code, err = serve(tmp_path, "--backend", "jetstream", *args, env=env)
    assert code == 2, err
    assert_clean(err, expected)


def test_a_flag_value_argparse_rejects_is_a_usage_line_with_exit_2(tmp_path: Path) -> None:
    code, err = serve(tmp_path, "--socket-mode", "rw-rw----")
    assert code == 2, err
    assert "Traceback" not in err
    assert "not an octal file mode" in err


def test_a_socket_path_too_long_for_unix_sockets_is_refused_with_exit_2(tmp_path: Path) -> None:
    code, err = serve(tmp_path, "--backend", "memory", socket="/tmp/" + "s" * 120 + ".sock")
    assert code == 2, err
    assert_clean(err, "longer than a unix socket path may be")


def test_a_data_dir_that_cannot_be_created_is_refused_with_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    code, err = serve(tmp_path, "--backend", "memory", data_dir=blocker / "data")
    assert code == 2, err
    assert_clean(err, f"cannot use data dir {blocker / 'data'}", "--data-dir")


def test_a_checkpoint_dir_with_the_jetstream_backend_is_refused_with_exit_2(
    tmp_path: Path,
) -> None:
    """Checkpoints of a JetStream run live in the stream's bucket, where every host sees them;
    a local directory would hide them from the others, so the flag is refused, not ignored."""
    url = f"nats://127.0.0.1:{free_port()}"  # refused before connecting
    code, err = serve(
        tmp_path,
        *("--backend", "jetstream", "--nats-url", url, "--checkpoint-dir", str(tmp_path / "cp")),
    )
    assert code == 2, err
    assert_clean(err, "--checkpoint-dir", "cannot be used with --backend jetstream")
    assert not (tmp_path / "cp").exists()
