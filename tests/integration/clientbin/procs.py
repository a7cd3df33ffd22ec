"""Start client programs as real subprocesses, each stopped by its own pid (also on failure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.waiting import NotYet, eventually

ROOT = Path(__file__).resolve().parents[3]


class Proc:
    """One subprocess whose stdout goes to a file that tests poll line by line."""

    def __init__(self, argv: list[str], out: Path, env: dict[str, str] | None = None) -> None:
        self.out = out
        with open(out, "wb") as fh:
            self.popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    @classmethod
    def module(cls, name: str, *args: str, out: Path, env: dict[str, str] | None = None) -> Proc:
        return cls([sys.executable, "-m", name, *args], out, env)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def lines(self) -> list[str]:
        text = self.out.read_text(errors="replace") if self.out.exists() else ""
        # only complete lines: a line being written is not read half
        return text.split("\n")[:-1]

    def wait_for_line(self, prefix: str, timeout_s: float = 90.0) -> str:
        def find() -> str:
            exited = self.popen.poll() is not None  # before reading: its last line is in
            for line in self.lines():
                if line.startswith(prefix):
                    return line
            if exited:
                raise AssertionError(f"process exited {self.popen.returncode}:\n{self.text()}")
            raise NotYet(f"no line {prefix!r} yet; output so far:\n{self.text()}")

        return eventually(find, what=f"a line {prefix!r} from pid {self.pid}", timeout_s=timeout_s)

    def text(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def kill9(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def wait(self, timeout_s: float = 60.0) -> int:
        return self.popen.wait(timeout_s)


class Procs:
    """Every process a test started; ``with Procs() as ps:`` kills survivors by pid on exit."""

    def __init__(self) -> None:
        self.started: list[Proc] = []

    def module(self, name: str, *args: str, out: Path, env: dict[str, str] | None = None) -> Proc:
        proc = Proc.module(name, *args, out=out, env=env)
        self.started.append(proc)
        return proc

    def script(self, path: Path, *args: str, out: Path, env: dict[str, str] | None = None) -> Proc:
        proc = Proc([sys.executable, str(path), *args], out, env)
        self.started.append(proc)
        return proc

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.started:
            p.kill9()
