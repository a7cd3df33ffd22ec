"""Who may talk to whom (docs/design.md#who-may-talk-to-whom), tried with real processes.

An impostor is a real process of another uid (``setpriv``) that pre-creates the victim's
default socket directory ``<tmp>/journald-<uid>`` (or a symbolic link of that name), listens
there and counts every byte and connection it receives. The daemon must refuse to serve in
it, writing nothing; the Python client and the CLI must refuse to dial it (the Go and TS
clients are tried the same way by their own suites: clients/go/socket_check_test.go,
clients/ts/test/socket.test.ts). A shared daemon (a socket group) must let the group's
members in, and keep each uid's runs to itself.

A second uid needs root (CI runs as root); elsewhere those tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import journald_client as jc
import pytest

from tests.daemon import JOURNALD, Daemon
from tests.search_grants import searchable

NOBODY = 65534  # alice: a member of the socket group by her primary group
NOGROUP = 65534
DAEMON_USER = 1  # bob: another uid, in the group only when given NOGROUP as his group
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv: a second uid owns the impostor's directory or dials",
)

IMPOSTOR = r"""
import os, selectors, signal, socket, sys
where, link = sys.argv[1], sys.argv[2]
sock = os.path.join(where, "journald.sock")
if link == "-":  # the victim's socket path itself, in a sticky directory
    sock = where
elif link:  # the victim's path is a symbolic link to a directory of ours
    os.mkdir(link, 0o700)
    os.symlink(link, where)
    sock = os.path.join(link, "journald.sock")
else:
    os.mkdir(where)
    os.chmod(where, 0o755)
srv = socket.socket(socket.AF_UNIX)
srv.bind(sock)
srv.listen(64)
counts = {"bytes": 0, "conns": 0}
def report(*_):
    print(f"{counts['bytes']} {counts['conns']}", flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, report)
sel = selectors.DefaultSelector()
sel.register(srv, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj is srv:
            conn, _ = srv.accept()
            counts["conns"] += 1
            sel.register(conn, selectors.EVENT_READ)
        else:
            data = key.fileobj.recv(65536)
            counts["bytes"] += len(data)
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
"""


def as_uid(uid: int, gid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


class Impostor:
    """Another uid waiting at the victim's default socket path."""

    def __init__(self, base: Path, symlink: bool = False, socket: Path | None = None) -> None:
        self.dir = base / f"journald-{os.geteuid()}"
        self.socket = socket or self.dir / "journald.sock"
        link = str(base / "impostor-owned") if symlink else ""
        where = str(self.dir)
        if socket is not None:
            where, link = str(socket), "-"
        self.proc = subprocess.Popen(
            [*as_uid(NOBODY, NOGROUP), sys.executable, "-c", IMPOSTOR, where, link],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        LIVE.append(self.proc)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def captured(self) -> tuple[int, int]:
        """Stop the impostor: (bytes, connections) it received."""
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=10)
        got_bytes, conns = out.split()
        return int(got_bytes), int(conns)


LIVE: list[subprocess.Popen[str]] = []
"""Impostors started by the current test (each stopped by its own pid at the end)."""


@pytest.fixture
def tmp_base() -> Iterator[Path]:
    """A /tmp of our own (sticky, world-writable, short enough for socket paths)."""
    base = Path(tempfile.mkdtemp(prefix="jdimp", dir="/tmp"))
    base.chmod(0o1777)
    yield base
    while LIVE:
        proc = LIVE.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(base, ignore_errors=True)


def default_env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "JOURNALD_SOCKET")}
    return {**env, "TMPDIR": str(base)}


def serve_refused(
    tmp_path: Path, env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data"
    return subprocess.run(
        [*JOURNALD, "serve", "--data-dir", str(data), "--backend", "file", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@ROOT_ONLY
@pytest.mark.parametrize("symlink", [False, True], ids=["precreated_dir", "symlink"])
def test_serve_refuses_a_socket_dir_another_uid_prepared_and_writes_nothing(
    tmp_path: Path, tmp_base: Path, symlink: bool
) -> None:
    impostor = Impostor(tmp_base, symlink=symlink)
    done = serve_refused(tmp_path, default_env(tmp_base))
    captured = impostor.captured()
    assert done.returncode == 2, done.stderr
    if symlink:
        assert "is a symbolic link" in done.stderr
        assert "rm " in done.stderr
    else:
        assert f"belongs to uid {NOBODY}" in done.stderr
        assert "rm -r" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # not even the data dir
    assert captured == (0, 0)  # not even the stale-socket probe dialed it


@ROOT_ONLY
def test_serve_refuses_another_uids_socket_at_its_path_in_a_sticky_dir_without_dialing_it(
    tmp_path: Path, tmp_base: Path
) -> None:
    impostor = Impostor(tmp_base, socket=tmp_base / "shared.sock")
    done = serve_refused(tmp_path, default_env(tmp_base), "--socket", str(impostor.socket))
    captured = impostor.captured()
    assert done.returncode == 2, done.stderr
    assert f"belongs to uid {NOBODY}" in done.stderr
    assert not (tmp_path / "data").exists()
    assert captured == (0, 0)
    with pytest.raises(jc.UntrustedSocket, match=r"the socket .* belongs to another user"):
        jc.connect(str(impostor.socket), timeout=2)


@ROOT_ONLY
def test_the_python_client_and_the_cli_refuse_an_impostor_and_send_it_nothing(
    tmp_base: Path,
) -> None:
    impostor = Impostor(tmp_base)
    with pytest.raises(jc.UntrustedSocket) as refused:
        jc.connect(str(impostor.socket), timeout=2).close()
    cli = subprocess.run(
        [*JOURNALD, "ls"], env=default_env(tmp_base), capture_output=True, text=True, timeout=60
    )
    captured = impostor.captured()
    print(f"impostor captured {captured[0]} bytes over {captured[1]} connections")
    err = refused.value
    assert err.code == "permission_denied"
    assert isinstance(err, jc.PermissionDenied)
    assert err.metadata["found_uid"] == str(NOBODY)
    assert err.metadata["path"] == str(impostor.dir)
    assert str(impostor.dir) in err.message
    assert "JOURNALD_DAEMON_UID" in err.message
    assert cli.returncode != 0, cli.stderr
    assert "refusing to dial" in cli.stderr, cli.stderr
    assert captured == (0, 0)


def test_a_world_writable_socket_dir_is_refused_and_a_private_one_serves_as_before(
    tmp_path: Path, tmp_base: Path
) -> None:
    sock_dir = tmp_base / "jd"
    sock_dir.mkdir()
    sock_dir.chmod(0o777)
    sock = sock_dir / "journald.sock"
    done = serve_refused(tmp_path, default_env(tmp_base), "--socket", str(sock))
    assert done.returncode == 2, done.stderr
    assert "writable by its group or others (mode 0777)" in done.stderr
    assert f"chmod 0700 {sock_dir}" in done.stderr
    assert not (tmp_path / "data").exists()
    with pytest.raises(jc.UntrustedSocket, match="writable by others"):
        jc.connect(str(sock), timeout=2)

    # the single-user default: made private, it serves as before and records no owner
    sock_dir.chmod(0o700)
    with Daemon(tmp_path, "file", socket=sock):
        with jc.connect(str(sock)) as client:
            fp = jc.compute(provider="anthropic", model="m", system_prompt="s")
            with client.start("mine", fp, "hello"):
                pass
            assert [r.run_id for r in client.list()] == ["mine"]
        assert stat.S_IMODE(sock_dir.stat().st_mode) == 0o700
    assert not (tmp_path / "data" / "sessions" / "mine" / "checkpoints" / "run-owner.json").exists()


@pytest.fixture
def checkout_reachable() -> Iterator[None]:
    """The second uid runs this checkout's venv: every directory above it must let others
    pass (a clone made in ``mktemp -d`` sits in a 0700 one). Grants only search (o+x) to the
    directories that lack it, for the test's length, and takes it back once no other test
    needs it (tests/search_grants.py)."""
    repo = Path(__file__).resolve().parents[3]
    with searchable([repo, Path(sys.executable).resolve().parent]):
        yield


def run_as(uid: int, gid: int, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*as_uid(uid, gid), sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


LIST_RUNS = """
import sys, journald_client as jc
with jc.connect(sys.argv[1], timeout=10) as c:
    print(" ".join(sorted(r.run_id for r in c.list())))
"""


@ROOT_ONLY
@pytest.mark.usefixtures("checkout_reachable")
def test_group_members_reach_a_group_socket_outside_systemd_and_others_do_not(
    tmp_path: Path,
) -> None:
    group = "nogroup"
    with Daemon(tmp_path, "memory", "--socket-group", group, "--socket-mode", "0660") as d:
        st = d.socket.parent.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o750, NOGROUP)
        member = run_as(NOBODY, NOGROUP, LIST_RUNS, str(d.socket))
        assert member.returncode == 0, member.stderr
        stranger = run_as(DAEMON_USER, DAEMON_USER, LIST_RUNS, str(d.socket))
        assert stranger.returncode != 0
        assert "DaemonUnavailable" in stranger.stderr


ALICE = """
import sys, journald_client as jc
fp = jc.compute(provider="anthropic", model="m", system_prompt="s")
with jc.connect(sys.argv[1], timeout=10) as c:
    run = c.start("alice-run", fp, "alice's secret prompt")
    print(run.lease_id, flush=True)
    sys.stdin.readline()  # hold the lease until told
    run.close()
"""

BOB = """
import json, sys, grpc, journald_client as jc
from journald_client.pb import journal_pb2 as pb, journal_pb2_grpc as pbg
sock, lease = sys.argv[1], sys.argv[2]
fp = jc.compute(provider="anthropic", model="m", system_prompt="s")
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except jc.JournaldError as err:
        out[name] = err.code
    except grpc.RpcError as err:
        out[name] = jc.errors.from_rpc_error(err, sock).code
with jc.connect(sock, timeout=10) as c:
    stub = pbg.JournalServiceStub(grpc.insecure_channel("unix:" + sock))
    attempt("load", lambda: list(c.load("alice-run")))
    attempt("fold", lambda: c.fold("alice-run"))
    attempt("history", lambda: c.history("alice-run"))
    attempt("resume", lambda: c.resume("alice-run", fp).close())
    append = pb.AppendRequest(run_id="alice-run", lease_id=lease)  # a leaked lease id
    attempt("append", lambda: stub.Append(append))
    attempt("delete", lambda: c.delete("alice-run"))
    attempt("export", lambda: c.export_checkpoint("alice-run", "01ARZ3NDEKTSV4RRFFQ69G5FAV"))
    attempt("import", lambda: c.import_checkpoint("alice-run", b"{}"))
    attempt("own run", lambda: c.start("bob-run", fp, "bob's prompt").close())
    out["list"] = sorted(r.run_id for r in c.list())
print(json.dumps(out))
"""


@ROOT_ONLY
@pytest.mark.slow
@pytest.mark.usefixtures("checkout_reachable")
def test_a_second_uid_may_not_read_append_or_delete_the_first_uids_run(tmp_path: Path) -> None:
    flags = ("--socket-group", "nogroup", "--socket-mode", "0660")
    bob = (DAEMON_USER, NOGROUP)  # in the group by his primary gid, not alice
    with Daemon(tmp_path, "file", *flags) as d:
        sock = str(d.socket)
        alice = subprocess.Popen(
            [*as_uid(NOBODY, NOGROUP), sys.executable, "-c", ALICE, sock],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert alice.stdin is not None
        assert alice.stdout is not None
        lease = alice.stdout.readline().strip()
        assert lease, "alice could not start her run"
        denied = run_as(*bob, BOB, sock, lease)
        alice.stdin.write("\n")
        alice.stdin.flush()
        assert alice.wait(30) == 0
        assert denied.returncode == 0, denied.stderr
        outcome = json.loads(denied.stdout)
        for call in ("load", "fold", "history", "resume", "append", "delete", "export", "import"):
            assert outcome[call] == "permission_denied", (call, outcome)
        assert outcome["own run"] == "ok"
        assert outcome["list"] == ["bob-run"]  # alice's run is not even listed
        alice_sees = run_as(NOBODY, NOGROUP, LIST_RUNS, sock)
        assert alice_sees.stdout.split() == ["alice-run"], alice_sees.stderr
        with jc.connect(sock) as root:  # root (and the daemon's uid) see every run
            assert sorted(r.run_id for r in root.list()) == ["alice-run", "bob-run"]
            assert len(list(root.load("alice-run"))) == 1

    owner = tmp_path / "data" / "sessions" / "alice-run" / "checkpoints" / "run-owner.json"
    assert json.loads(owner.read_bytes()) == {"uid": NOBODY}
    with Daemon(tmp_path, "file", *flags) as d:  # the owner outlives a restart
        again = run_as(*bob, BOB, str(d.socket), "no-lease")
        assert json.loads(again.stdout)["load"] == "permission_denied", again.stderr
    with Daemon(tmp_path, "file", *flags, "--shared-runs") as d:  # unless the operator allows
        shared = run_as(*bob, BOB, str(d.socket), "no-lease")
        outcome = json.loads(shared.stdout)
        assert outcome["load"] == "ok", shared.stderr
        assert outcome["delete"] == "ok", shared.stderr


def test_a_private_daemons_peer_is_its_own_uid_and_the_socket_dir_is_made_0700(
    tmp_path: Path, tmp_base: Path
) -> None:
    sock = tmp_base / "fresh" / "journald.sock"
    with Daemon(tmp_path, "memory", socket=sock) as d:
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert not (sock.parent / ".peers").exists()  # no gate, no relay
        with grpc.insecure_channel(d.target) as ch:
            grpc.channel_ready_future(ch).result(timeout=10)
