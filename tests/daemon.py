"""Run a real journald daemon as a subprocess on a temp socket and data dir (tests only)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.waiting import wait_until

JOURNALD = [sys.executable, "-m", "journald.cli"]
START_TIMEOUT_S = 60.0
NO_SCRUB = ["--scrub-interval-s", "0"]
"""How long a daemon may take to serve: a bound on a condition, generous for a machine
running two test suites at once (an idle start takes about a second)."""


class Daemon:
    """``Daemon(tmp_path).start()``; stop by its own pid (``stop``, ``kill9``)."""

    def __init__(
        self,
        tmp_path: Path,
        backend: str = "memory",
        *extra: str,
        data_dir: Path | None = None,
        socket: Path | None = None,
        env: dict[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.tmp_path = tmp_path
        self.backend = backend
        self.extra = list(extra)
        self.data_dir = data_dir or tmp_path / "data"
        # unix socket paths are limited to ~107 bytes: keep it short
        self.socket = socket or Path(
            f"/tmp/jd-{os.getpid()}-{abs(hash(str(tmp_path))) % 10**8}/journald.sock"
        )
        self.env = env
        self.cwd = cwd
        """The daemon's working directory (None: this process's); ``python -m`` imports
        from it first, so a test running another release's code starts it there."""
        self.nofile = nofile
        """RLIMIT_NOFILE (soft, hard) to start the daemon under (None: this process's)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = tmp_path / "daemon.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def target(self) -> str:
        return f"unix://{self.socket}"

    def command(self) -> list[str]:
        limit: list[str] = []
        if self.nofile is not None:  # set in the child, then exec the daemon
            limit = [
                sys.executable,
                "-c",
                "import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, {self.nofile}); "
                "os.execv(sys.executable, sys.argv[1:])",
            ]
        return [
            *limit,
            *JOURNALD,
            "serve",
            "--socket",
            str(self.socket),
            "--data-dir",
            str(self.data_dir),
            "--backend",
            self.backend,
            *self.extra,
            *self.scrub_off(),
        ]

    def scrub_off(self) -> list[str]:
        """``--scrub-interval-s 0`` unless the test sets the scrubber itself: a background pass
        would read every run under a test or a benchmark that measures something else."""
        return [] if any(a.startswith("--scrub") for a in self.extra) else NO_SCRUB

    def start(self) -> Daemon:
        env = {**os.environ, **(self.env or {})}
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, env=env, cwd=self.cwd)
        log.close()
        try:
            self.wait_ready()
        except BaseException:
            self.kill9()  # `with Daemon(...)` never reaches __exit__ when start fails
            self._remove_socket_dir()
            raise
        return self

    def wait_ready(self) -> None:
        try:
            wait_until(self._serving, what="the daemon to serve", timeout_s=START_TIMEOUT_S)
        except AssertionError:
            log = self.log()
            raise RuntimeError(f"daemon not ready after {START_TIMEOUT_S}s:\n{log}") from None

    def _serving(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
        if not self.socket.exists():
            return False
        try:
            with grpc.insecure_channel(self.target) as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=1.0
                )
        except grpc.RpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def vm_rss_bytes(self) -> int:
        """The daemon's resident set size now (``VmRSS`` of /proc/PID/status)."""
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no VmRSS for pid {self.pid}")

    def open_fds(self) -> int:
        """How many file descriptors the daemon holds now (/proc/PID/fd)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM and wait; the socket directory is removed once the daemon has gone."""
        if self.proc is None or self.proc.poll() is not None:
            self._remove_socket_dir()
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._remove_socket_dir()

    def _remove_socket_dir(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.unlink(missing_ok=True)
            self.socket.parent.rmdir()

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> Daemon:
        self.kill9()
        return self.start()

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop()
