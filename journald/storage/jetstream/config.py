"""What a JetStream stream must look like for journald, and the commands that make it so.

Pure: no NATS connection. ``check_stream_config`` refuses an unsafe stream with a
``StreamConfigError`` whose ``fixes`` are complete command lines for the ``nats`` CLI (natscli
0.5; each carries ``--server`` and the connection flags journald itself was given, and ``-f``
so a script can run it) and, for a stream whose retention cannot be edited, the
``journald migrate`` commands that move its runs to a correctly configured stream of the same
name. The fixes are tested by running them with the real ``nats`` CLI
(tests/storage/jetstream/test_jetstream_fixes.py).

The stream journald needs (deploy/nats/stream.json): exactly one ``<prefix>.>`` subject; one
message per subject, refused rather than replaced (``max_msgs_per_subject: 1``,
``discard: new``, ``discard_new_per_subject``); no ``max_age``; ``retention: limits``;
messages up to ``RECORD_FLOOR`` bytes; acks on.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from journald.core.errors import BackendUnavailable

RECORD_FLOOR = 1024 * 1024
"""The stream must accept messages of at least this size (max_msg_size -1 or >= 1 MiB): the
largest record journald promises to store is what the server's ``max_payload`` allows (1 MiB by
default) minus the room kept for headers."""
DEFAULT_PREFIX = "journald"
ATOMIC_SERVER = (2, 12, 0)
"""First nats-server with atomic batch publish (``allow_atomic``, natscli ``--allow-batch``)."""


class NatsConfigError(BackendUnavailable):
    """The NATS side is reachable but set up so journald cannot use it (a stream, the server's
    version or limits, rejected credentials): retrying does not help, the operator must change
    the configuration. Code ``backend_unavailable``; ``journald serve`` exits 2 on it."""

    def __init__(
        self,
        problem: str,
        fixes: Sequence[str] = (),
        *,
        note: str = "",
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        self.problem = problem
        self.fixes = list(fixes)
        text = problem
        if self.fixes:
            head = "fix (run in order, then start journald again):" if len(fixes) > 1 else "fix:"
            text += "\n" + head + "".join(f"\n  {cmd}" for cmd in self.fixes)
        if note:
            text += "\n" + note
        super().__init__(text, metadata=metadata)


class StreamConfigError(NatsConfigError):
    """The bound stream is missing or unsafe for journald; ``fixes`` are the commands that
    repair it."""


@dataclass(frozen=True, slots=True)
class Cli:
    """How to reach the server from a shell: ``nats`` and ``journald migrate`` prefixes."""

    url: str = "nats://127.0.0.1:4222"
    natscli_flags: tuple[str, ...] = ()
    journald_flags: tuple[str, ...] = ()
    secrets_note: str = ""
    """Where the ``nats`` CLI takes a secret journald was given through the environment."""

    @property
    def nats(self) -> str:
        return shlex.join(["nats", "--server", self.url, *self.natscli_flags])

    def migrate(self, src: str, dst: str) -> str:
        return shlex.join(["journald", "migrate", "--from", src, "--to", dst, *self.journald_flags])

    def location(self, stream: str) -> str:
        return f"jetstream:{self.url}/{stream}"


def stream_add_command(
    stream: str,
    prefix: str = DEFAULT_PREFIX,
    replicas: int = 1,
    *,
    cli: Cli | None = None,
    atomic: bool = True,
) -> str:
    """A ready-to-run ``nats stream add`` line creating the stream of deploy/nats/stream.json
    (``atomic`` False drops ``allow_atomic`` for a nats-server older than 2.12)."""
    nats = (cli or Cli()).nats
    return (
        f"{nats} stream add {shlex.quote(stream)} --subjects {shlex.quote(prefix + '.>')} "
        f"--storage file --replicas {replicas} --retention limits --discard new "
        "--discard-per-subject --max-msgs-per-subject=1 --max-msgs=-1 --max-bytes=-1 "
        "--max-age=0 --max-msg-size=-1 --max-consumers=-1 --dupe-window=2m --ack "
        "--allow-direct --no-allow-rollup --no-deny-delete --no-deny-purge "
        + ("--allow-batch " if atomic else "")
        + "--defaults"
    )


def _edit(stream: str, cli: Cli | None, *flags: str) -> str:
    return f"{(cli or Cli()).nats} stream edit {shlex.quote(stream)} -f " + " ".join(flags)


def _valid_wildcard(subject: str) -> bool:
    tokens = subject.split(".")
    return (
        len(tokens) >= 2
        and tokens[-1] == ">"
        and all(t and not any(c in t for c in "*> \t\r\n") for t in tokens[:-1])
    )


def subject_prefix(stream: str, subjects: Sequence[str] | None, cli: Cli | None = None) -> str:
    """Derive the prefix from the stream's single ``<prefix>.>`` subject."""
    subjects = list(subjects or [])
    wild = [s for s in subjects if "*" in s or ">" in s]
    dedicated = (
        "or give journald a stream of its own (deploy/nats/README.md) and pass its name with "
        "--stream"
    )
    meta = {"stream": stream}
    if not wild:
        raise StreamConfigError(
            f"stream {stream} has no `<prefix>.>` wildcard subject (subjects: {subjects}); "
            "journald needs exactly one",
            [_edit(stream, cli, f"--subjects={shlex.quote(DEFAULT_PREFIX + '.>')}")],
            note=dedicated,
            metadata=meta,
        )
    if len(subjects) != 1:
        keep = [s for s in wild if _valid_wildcard(s)]
        raise StreamConfigError(
            f"stream {stream} has {len(wild)} wildcard subject(s) among {subjects}; journald "
            "derives its prefix from exactly one `<prefix>.>` subject and nothing else"
            + ("" if len(keep) == 1 else "; keep exactly one `<prefix>.>` subject"),
            [_edit(stream, cli, f"--subjects={shlex.quote(keep[0])}")] if len(keep) == 1 else [],
            note=dedicated,
            metadata=meta,
        )
    subject = subjects[0]
    tokens = subject.split(".")
    if len(tokens) < 2 or tokens[-1] != ">":
        raise StreamConfigError(
            f"stream {stream} subject {subject!r} is not of the form `<prefix>.>`",
            note=dedicated,
            metadata=meta,
        )
    if not _valid_wildcard(subject):
        raise StreamConfigError(
            f"stream {stream} subject {subject!r} has an empty or wildcard token before "
            "the final `>`; journald needs a literal prefix",
            note=dedicated,
            metadata=meta,
        )
    return ".".join(tokens[:-1])


def _enum(cfg: Any, name: str) -> str:
    value = getattr(cfg, name, None)
    return str(getattr(value, "value", value) or "")


@dataclass(frozen=True, slots=True)
class Problem:
    """One unsafe setting: what is wrong and why, and the ``nats stream edit`` flags that fix
    it (none when the setting cannot be edited)."""

    what: str
    edit_flags: tuple[str, ...] = ()


def config_problems(cfg: Any) -> list[Problem]:
    """Every unsafe setting of a stream config (``retention: workqueue`` has no edit flag:
    the server never changes it; see ``check_stream_config`` for that route)."""
    out: list[Problem] = []
    mps = getattr(cfg, "max_msgs_per_subject", -1)
    if mps != 1:
        out.append(
            Problem(
                f"max msgs per subject is {mps}, journald needs 1 (each record subject is "
                "write-once)",
                ("--max-msgs-per-subject=1",),
            )
        )
    discard = _enum(cfg, "discard")
    if discard != "new":
        out.append(
            Problem(
                f"discard policy is {discard or 'old'}, journald needs new (an old record must "
                "never be dropped to make room)",
                ("--discard=new",),
            )
        )
    if not getattr(cfg, "discard_new_per_subject", False):
        out.append(
            Problem(
                "discard new per subject is off, journald needs it (a second message on a "
                "record subject must be refused, not replace it)",
                ("--discard-per-subject",),
            )
        )
    max_age = getattr(cfg, "max_age", None) or 0
    if max_age and max_age > 0:
        out.append(
            Problem(
                f"max age is {max_age:g}s, journald needs none (records are kept until the run "
                "is deleted)",
                ("--max-age=0",),
            )
        )
    mms = getattr(cfg, "max_msg_size", -1)
    if mms is not None and 0 <= mms < RECORD_FLOOR:
        out.append(
            Problem(
                f"max message size is {mms} bytes, below journald's record floor of "
                f"{RECORD_FLOOR} bytes",
                ("--max-msg-size=-1",),
            )
        )
    retention = _enum(cfg, "retention")
    if retention not in ("", "limits"):
        why = (
            f"retention is {retention}, journald needs limits (records must not disappear "
            "when consumed)"
        )
        # the server edits limits <-> interest in place, never to or from workqueue
        out.append(Problem(why, ("--retention=limits",) if retention == "interest" else ()))
    if getattr(cfg, "no_ack", False):
        out.append(Problem("acks are disabled, journald needs them", ("--ack",)))
    return out


def copy_dir_for(stream: str) -> str:
    """Where the printed migration route parks a stream's runs (relative to the shell)."""
    return f"./journald-copy-of-{stream}"


def check_stream_config(
    stream: str,
    cfg: Any,
    *,
    cli: Cli | None = None,
    messages: int = 0,
    atomic: bool = True,
    bucket_adds: Sequence[str] = (),
) -> str:
    """Return the subject prefix of a safe stream config, or raise ``StreamConfigError``
    carrying the commands that fix it (``messages``: what the stream holds now, which decides
    whether a stream that must be recreated is first emptied into a copy; ``bucket_adds``:
    the ``nats object add`` lines of the stream's buckets that do not exist yet, which the
    recreated stream needs before a run can be copied back or the daemon bind it)."""
    c = cli or Cli()
    prefix = subject_prefix(stream, getattr(cfg, "subjects", None), c)
    problems = config_problems(cfg)
    if not problems:
        return prefix
    what = f"stream {stream} is not safe for journald: " + "; ".join(p.what for p in problems)
    meta = {"stream": stream, "problems": len(problems)}
    if all(p.edit_flags for p in problems):
        flags = [f for p in problems for f in p.edit_flags]
        raise StreamConfigError(
            what, [_edit(stream, c, *flags)], note=c.secrets_note, metadata=meta
        )
    # a setting the server never edits: only a new stream fixes it
    replicas = int(getattr(cfg, "num_replicas", 1) or 1)
    add = stream_add_command(stream, prefix, replicas, cli=c, atomic=atomic)
    remove = f"{c.nats} stream rm {shlex.quote(stream)} -f"
    if messages == 0:
        raise StreamConfigError(
            f"{what}; the setting cannot be edited and the stream is empty: recreate it",
            [remove, add, *bucket_adds],
            note=c.secrets_note,
            metadata=meta,
        )
    copy = f"file:{copy_dir_for(stream)}"
    raise StreamConfigError(
        f"{what}; the setting cannot be edited, so the stream must be recreated: copy its "
        f"{messages} message(s) out (migrate only reads it), delete it, create it again, "
        "copy the runs back",
        [
            c.migrate(c.location(stream), copy),
            remove,
            add,
            *bucket_adds,
            c.migrate(copy, c.location(stream)),
        ],
        note=c.secrets_note,
        metadata=meta,
    )
