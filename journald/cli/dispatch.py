"""How a client command of the journald CLI is registered and run: ``Command``, the
``Context`` it runs with (the daemon client, the output), and ``dispatch``, which maps every
failure to an exit code once for all commands.

Adding a command: write ``add(parser)`` (its arguments) and ``run(ctx, args) -> exit code``,
then add ``Command("name", "help", add, run)`` to its module's ``COMMANDS`` (the modules are
listed once, in ``journald.program.command_modules``). The exit codes:

====  ==========================================================================
0     success
1     any other failure (the daemon's sentence is printed)
2     usage error (argparse)
4     not found (run or checkpoint)
5     the daemon is unreachable (with a hint to start it)
130   interrupted (Ctrl-C)
====  ==========================================================================

Apart from the commands themselves (``journald.cli.commands``, ``checkpoint_commands``,
``recover``, ``verify``, ``journald.view.command``), which all run through it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

from journald_client import Client, DaemonUnavailable, InvalidId, JournaldError, NotFoundError
from journald_client.paths import check_socket, default_socket_path

from journald.cli import replay
from journald.cli.replay import Line

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 4
EXIT_UNREACHABLE = 5
EXIT_INTERRUPTED = 130
CONNECT_TIMEOUT_S = 10.0
START_HINT = "start it with `journald serve` (or `make run`)"

STYLES = {
    "header": "bold",
    "user": "green",
    "assistant": "",
    "text": "",
    "thinking": "dim italic",
    "call": "cyan",
    "result": "dim",
    "error": "red",
    "pending": "yellow",
    "note": "magenta",
}


# --- context ---------------------------------------------------------------------------


class Context:
    """What a command runs with: the daemon client, the output stream and its width."""

    def __init__(
        self,
        socket: str | None,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
        width: int | None = None,
    ) -> None:
        self.socket = socket
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.width = width or shutil.get_terminal_size((replay.DEFAULT_WIDTH, 24)).columns
        self._client: Client | None = None
        self._console: Any = None

    @property
    def socket_path(self) -> str:
        return self.socket or default_socket_path()

    @property
    def client(self) -> Client:
        """A client whose daemon has answered: fails at once (``DaemonUnavailable``) when
        nothing listens on the socket, else waits up to ``CONNECT_TIMEOUT_S`` for a busy
        daemon to finish the connection handshake."""
        if self._client is None:
            path = self.socket_path.removeprefix("unix:")
            check_socket(path)  # whose socket it is, before even the probe dials it
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError as exc:
                why = (exc.strerror or str(exc)).lower()
                raise DaemonUnavailable(
                    f"cannot connect to {path}: {why}", metadata={"socket": path, "why": why}
                ) from None
            finally:
                probe.close()
            client = Client(self.socket, name="journald-cli")
            try:
                client.wait_ready(CONNECT_TIMEOUT_S)
            except BaseException:
                client.close()
                raise
            self._client = client
        return self._client

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.out, highlight=False, width=self.width)
        return self._console

    def lines(self, lines: Iterable[Line]) -> None:
        """Print rendered lines: styled on a terminal, plain otherwise."""
        if self.tty:
            from rich.text import Text

            for line in lines:
                self.console.print(Text(line.text, style=STYLES.get(line.kind, "")), soft_wrap=True)
        else:
            for line in lines:
                self.out.write(line.text + "\n")
        self.out.flush()

    def text(self, text: str) -> None:
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def json(self, value: object) -> None:
        self.text(json.dumps(value, indent=2, ensure_ascii=False))

    def note(self, text: str) -> None:
        """A message for the operator on stderr (never mixed into piped output)."""
        self.err.write(f"journald: {text}\n")
        self.err.flush()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


# --- registration ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Context, argparse.Namespace], int]


def add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        dest="global_socket",
        default=None,
        metavar="PATH",
        help="the daemon's socket (default: $JOURNALD_SOCKET, else "
        "$XDG_RUNTIME_DIR/journald/journald.sock, else a per-user temp dir)",
    )


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Iterable[Command]
) -> None:
    """Add ``commands`` to the CLI's sub-parsers (names must be unique)."""
    names = [c.name for c in commands]
    if len(names) != len(set(names)):
        raise ValueError(f"two CLI commands share a name: {sorted(names)}")
    for cmd in commands:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        p.add_argument(
            "--socket",
            default=None,
            metavar="PATH",
            help="the daemon's socket (as the global --socket)",
        )
        cmd.add(p)
        p.set_defaults(client_command=cmd)


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed client command, mapping failures to the documented exit codes."""
    cmd: Command = args.client_command
    ctx = Context(getattr(args, "socket", None) or getattr(args, "global_socket", None))
    try:
        if isinstance(getattr(args, "run", None), str):
            try:
                args.run = resolve_run_id(ctx.client, args.run)
            except DaemonUnavailable:
                if cmd.name != "view":  # the viewer waits for the daemon and says how to start it
                    raise
        return cmd.run(ctx, args)
    except DaemonUnavailable as err:
        where = (err.metadata.get("socket") or ctx.socket_path).removeprefix("unix:")
        ctx.note(unreachable(where, err, given=ctx.socket is not None))
        return EXIT_UNREACHABLE
    except NotFoundError as err:
        hint = "" if "journald ls" in err.message else " (list runs with `journald ls`)"
        ctx.note(f"{err.message}{hint}")
        return EXIT_NOT_FOUND
    except JournaldError as err:
        ctx.note(f"{err.code}: {err.message}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`journald ls | head`): not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    finally:
        ctx.close()


def unreachable(where: str, err: DaemonUnavailable, *, given: bool) -> str:
    """What is at ``where`` instead of a daemon, and how to start one there."""
    if os.path.isdir(where):
        inside = os.path.join(where, "journald.sock")
        return (
            f"{where} is a directory, not the daemon's socket\nhint: pass the socket file "
            f"(e.g. --socket {inside}); a daemon started with `journald serve --socket "
            f"{inside}` listens there"
        )
    if os.path.exists(where) and not stat.S_ISSOCK(os.stat(where).st_mode):
        return (
            f"{where} is a regular file, not the daemon's socket\nhint: pass the socket a "
            "daemon listens on (`journald serve --socket PATH` creates it)"
        )
    if not os.path.exists(where):
        what = f"cannot reach the journald daemon at {where} (no socket there)"
    elif "why" in err.metadata:
        what = f"cannot reach the journald daemon at {where} ({err.metadata['why']})"
    else:
        what = err.message.split("; ")[0]
    if given:  # the daemon must be started on the socket the command was pointed at
        return f"{what}\nhint: start it with `journald serve --socket {where}`"
    return f"{what}\nhint: {START_HINT}, or pass --socket PATH (or set JOURNALD_SOCKET)"


# --- run ids ---------------------------------------------------------------------------

FRAMEWORK_ID_LABELS = ("langgraph.thread_id", "openai_agents.session_id")
"""Labels under which the framework adapters keep their own id of a run (a LangGraph thread,
an Agents session): a command given that id finds the run it maps to."""


def resolve_run_id(client: Client, given: str) -> str:
    """The run a command means: ``given`` itself when such a run exists, else the one run
    whose framework label (``FRAMEWORK_ID_LABELS``) is ``given`` (a thread id that is not a
    safe run id maps to ``lg-<digest>``). Several such runs (a LangGraph thread and an Agents
    session sharing an id) are refused naming them."""
    runs = client.list()
    if any(i.run_id == given for i in runs):
        return given
    found = sorted(
        i.run_id for i in runs if any(i.labels.get(k) == given for k in FRAMEWORK_ID_LABELS)
    )
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise InvalidId(
            f"{given!r} names several runs ({', '.join(found)}): a LangGraph thread and an "
            "Agents session share that id; give the run id itself",
            metadata={"id": given, "runs": ",".join(found)},
        )
    return given
