"""On-CPU profile of one thread by ``perf record``, summarised by library and by symbol.

py-spy samples a thread whenever the kernel calls it runnable, so a thread preempted inside a
system call (the kworker that an AIO ``io_submit`` wakes runs on the submitting CPU first)
is charged to that call's Python frame although it spent no CPU there. ``perf`` counts only
cycles the thread ran, in the kernel as well as in every library, and so is the profile that
answers "where does the daemon's CPU go": py-spy's then says which Python code it is.

    start(tid, seconds, out)   # perf record -g -t TID (needs perf: Debian's linux-perf)
    summarize(out, title)      # shares by library, top symbols, the named kernel paths

Only the thread given is profiled: the daemon's event-loop thread is its main thread, whose
thread id is the process id.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# kernel entry points worth a line of their own, whether or not they are in the top symbols:
# the durable write's system calls and the loop's wake-ups
KERNEL_PATHS = (
    "__x64_sys_io_submit",
    "__x64_sys_io_getevents",
    "__x64_sys_pwrite64",
    "__x64_sys_epoll_pwait",
    "__sys_sendmsg",
    "sock_recvmsg",
    "__x64_sys_futex",
    "eventfd_write",
    "finish_task_switch.isra.0",
)
_ROW = re.compile(r"^\s*(?P<children>[\d.]+)%\s+(?P<self>[\d.]+)%\s+(?P<rest>.+)$")
_SELF_ROW = re.compile(r"^\s*(?P<share>[\d.]+)%\s+(?P<rest>.+)$")


def available() -> bool:
    """Whether ``perf`` is installed and may count this machine's cycles."""
    exe = shutil.which("perf")
    if exe is None:
        return False
    probe = subprocess.run(
        [exe, "stat", "-e", "task-clock", "true"], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


def start(tid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """``perf record -g`` of one thread for ``seconds`` (call-graph by frame pointers)."""
    exe = shutil.which("perf")
    if exe is None:
        raise RuntimeError("perf is not installed (Debian: apt-get install linux-perf)")
    return subprocess.Popen(
        [exe, "record", "-g", "-t", str(tid), "-o", str(out), "--", "sleep", f"{seconds:.1f}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _report(data: Path, *args: str) -> list[str]:
    exe = shutil.which("perf") or "perf"
    done = subprocess.run(
        [exe, "report", "-i", str(data), "--stdio", "-g", "none", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if line.strip() and line[0] != "#"]


def summarize(data: Path, title: str, top: int = 25) -> str:
    """A text summary: the thread's cycles by library (self), its top symbols (self), and the
    kernel paths of ``KERNEL_PATHS`` with their children (cycles under them)."""
    lines = [title, ""]
    lines.append("self share by library:")
    for row in _report(data, "--no-children", "--sort", "dso")[:12]:
        m = _SELF_ROW.match(row)
        if m:
            lines.append(f"  {float(m['share']):6.2f}%  {m['rest'].strip()}")
    lines += ["", "self share by symbol:"]
    for row in _report(data, "--no-children", "--sort", "dso,sym")[:top]:
        m = _SELF_ROW.match(row)
        if m:
            lines.append(f"  {float(m['share']):6.2f}%  {' '.join(m['rest'].split())}")
    lines += ["", "kernel paths (share with what they call, self):"]
    found: dict[str, tuple[float, float]] = {}
    for row in _report(data, "--children", "--sort", "sym"):
        m = _ROW.match(row)
        if not m:
            continue
        name = m["rest"].split()[-1]
        if name in KERNEL_PATHS and name not in found:
            found[name] = (float(m["children"]), float(m["self"]))
    for name in KERNEL_PATHS:
        children, own = found.get(name, (0.0, 0.0))
        lines.append(f"  {children:6.2f}% {own:6.2f}%  {name}")
    return "\n".join(lines) + "\n"
