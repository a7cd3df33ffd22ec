"""The Object Store buckets a JetStream run keeps beside its stream, and how the daemon binds them.

A run on JetStream owns three kinds of side data that must move between hosts with its
records: checkpoints and the fold mark (bucket ``<STREAM>_CHECKPOINTS``) and attachments
(bucket ``<STREAM>_ATTACHMENTS``). Why Object Store and not KV for checkpoints: a checkpoint
is a whole governed conversation and a fold mark may carry a folded snapshot of several MB,
beyond any single message (``max_payload``, 1 MiB by default); the Object Store chunks them,
and ``journald.storage.jetstream.objects`` adds the write-once fence a KV ``create`` would
have given.

The buckets are bound like the stream
(docs/design.md#run-buckets-checkpoints-marks-and-attachments): journald never creates one.
A missing bucket, or one whose settings could lose what the stream keeps, is refused with
the ``nats object ...`` commands that fix it:

* file storage (memory storage loses every checkpoint when the servers restart);
* at least the stream's replicas (a checkpoint is as durable as the records it copies);
* no TTL (``max_age``): checkpoints and attachments live exactly as long as their run;
* purge allowed, rollup allowed, not sealed (a run's delete purges its objects; a mark is
  replaced by rollup).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors

from journald.storage.jetstream.config import Cli, NatsConfigError, _enum
from journald.storage.jetstream.connect import answered
from journald.storage.jetstream.errors import answered_or_unavailable
from journald.storage.jetstream.objects import ObjectBucket, stream_of

CHECKPOINTS = "CHECKPOINTS"
ATTACHMENTS = "ATTACHMENTS"
ROLES = (CHECKPOINTS, ATTACHMENTS)


class BucketConfigError(NatsConfigError):
    """A bucket journald needs is missing or unsafe; ``fixes`` are the commands that repair it."""


def bucket_name(stream: str, role: str) -> str:
    """``<STREAM>_CHECKPOINTS`` / ``<STREAM>_ATTACHMENTS``: every stream has its own pair."""
    return f"{stream}_{role}"


def object_add_command(bucket: str, replicas: int = 1, *, cli: Cli | None = None) -> str:
    """A ready-to-run ``nats object add`` line for a bucket as deploy/nats/buckets.sh makes it."""
    return (
        f"{(cli or Cli()).nats} object add {shlex.quote(bucket)} --storage file "
        f"--replicas {replicas} --no-compress"
    )


def _object_edit(bucket: str, cli: Cli | None, *flags: str) -> str:
    return f"{(cli or Cli()).nats} object edit {shlex.quote(bucket)} " + " ".join(flags)


@dataclass(frozen=True, slots=True)
class BucketProblem:
    what: str
    edit_flags: tuple[str, ...] = ()
    """Empty when the setting cannot be edited (the bucket must be recreated)."""


def bucket_problems(cfg: Any, replicas: int) -> list[BucketProblem]:
    """Every unsafe setting of an Object Store bucket's stream config (``replicas``: the
    journald stream's, which the bucket must at least match)."""
    out: list[BucketProblem] = []
    storage = _enum(cfg, "storage") or "file"
    if storage != "file":
        out.append(
            BucketProblem(
                f"storage is {storage}, journald needs file (a restart must not lose "
                "checkpoints or attachments)"
            )
        )
    have = int(getattr(cfg, "num_replicas", 1) or 1)
    if have < replicas:
        out.append(
            BucketProblem(
                f"it has {have} replica(s), journald needs at least the stream's {replicas} "
                "(side data as durable as the records)",
                (f"--replicas={replicas}",),
            )
        )
    max_age = getattr(cfg, "max_age", None) or 0
    if max_age > 0:
        out.append(
            BucketProblem(
                f"objects expire after {max_age:g}s (TTL), journald needs none (they live as "
                "long as their run)",
                ("--ttl=0s",),
            )
        )
    if getattr(cfg, "deny_purge", False):
        out.append(BucketProblem("purge is denied, journald purges a deleted run's objects"))
    if not getattr(cfg, "allow_rollup_hdrs", True):
        out.append(BucketProblem("rollup is not allowed, the Object Store format needs it"))
    if getattr(cfg, "sealed", False):
        out.append(BucketProblem("the bucket is sealed (read-only)"))
    return out


def check_bucket_config(
    bucket: str, cfg: Any, replicas: int, *, objects: int, cli: Cli | None = None
) -> None:
    """Raise ``BucketConfigError`` with the commands that make ``bucket`` safe (``objects``:
    messages it holds now; a non-empty bucket is never removed by a printed command)."""
    c = cli or Cli()
    problems = bucket_problems(cfg, replicas)
    if not problems:
        return
    what = f"bucket {bucket} is not safe for journald: " + "; ".join(p.what for p in problems)
    meta = {"bucket": bucket, "problems": len(problems)}
    if all(p.edit_flags for p in problems):
        flags = [f for p in problems for f in p.edit_flags]
        raise BucketConfigError(
            what, [_object_edit(bucket, c, *flags)], note=c.secrets_note, metadata=meta
        )
    add = object_add_command(bucket, max(replicas, 1), cli=c)
    if objects == 0:
        raise BucketConfigError(
            f"{what}; the setting cannot be edited and the bucket is empty: recreate it",
            [f"{c.nats} object rm {shlex.quote(bucket)} -f", add],
            note=c.secrets_note,
            metadata=meta,
        )
    raise BucketConfigError(
        f"{what}; the setting cannot be edited and the bucket holds {objects} message(s): "
        f"back it up (`{c.nats} stream backup {stream_of(bucket)} DIR`), stop every journald, "
        "remove and recreate it, then put its objects back",
        [add],
        note=c.secrets_note,
        metadata=meta,
    )


async def bind_buckets(
    nc: Any,
    stream: str,
    where: str,
    cli: Cli,
    *,
    ack_timeout_s: float,
    retry_window_s: float,
    required: bool = True,
    leader_wait_s: float = 0.0,
) -> dict[str, ObjectBucket | None]:
    """The run's buckets of ``stream``, checked; a role maps to None only when the bucket is
    missing and not ``required`` (``journald migrate`` reading a stream that never had one)."""
    jsm = nc.jsm(timeout=ack_timeout_s)
    what = f"the stream info request for {stream}"
    with answered_or_unavailable(where, what):
        info = await answered(what, where, lambda: jsm.stream_info(stream), leader_wait_s)
        replicas = int(info.config.num_replicas or 1)
    out: dict[str, ObjectBucket | None] = {}
    missing: list[str] = []
    for role in ROLES:
        name = bucket_name(stream, role)
        with answered_or_unavailable(where, f"the info request for bucket {name}"):
            try:
                info = await answered(
                    f"the info request for bucket {name}",
                    where,
                    lambda n=name: jsm.stream_info(stream_of(n)),  # type: ignore[misc]
                    leader_wait_s,
                )
            except nats.js.errors.NotFoundError:  # absent: named with the command adding it
                missing.append(name)
                out[role] = None
                continue
        if required:
            check_bucket_config(
                name, info.config, replicas, objects=int(info.state.messages or 0), cli=cli
            )
        out[role] = ObjectBucket(
            nc, name, ack_timeout_s=ack_timeout_s, retry_window_s=retry_window_s
        )
    if missing and required:
        raise missing_buckets(stream, missing, replicas, where, cli)
    return out


async def absent_bucket_adds(
    jsm: Any, stream: str, replicas: int, where: str, cli: Cli
) -> list[str]:
    """The ``nats object add`` lines of ``stream``'s buckets and the ``nats kv add`` line of
    its lease bucket that do not exist (for a route that recreates the stream: the daemon,
    and a migration into it, need all three)."""
    # the lease module builds on this one's BucketConfigError: imported here, not at the top
    from journald.storage.jetstream.lease_bucket import kv_add_command, kv_stream, lease_bucket_name

    wanted = [
        (bucket_name(stream, role), stream_of(bucket_name(stream, role)), object_add_command)
        for role in ROLES
    ]
    leases = lease_bucket_name(stream)
    wanted.append((leases, kv_stream(leases), kv_add_command))
    out: list[str] = []
    for name, backing, add in wanted:
        with answered_or_unavailable(where, f"the info request for bucket {name}"):
            try:
                await jsm.stream_info(backing)
            except nats.js.errors.NotFoundError:  # absent: the route must add it
                out.append(add(name, replicas, cli=cli))
    return out


def missing_buckets(
    stream: str, missing: Sequence[str], replicas: int, where: str, cli: Cli
) -> BucketConfigError:
    return BucketConfigError(
        f"bucket(s) {', '.join(missing)} do not exist on {where}; stream {stream} keeps its "
        "runs' checkpoints and attachments there and journald never creates them (the "
        "operator owns durability)",
        [object_add_command(b, replicas, cli=cli) for b in missing],
        note=cli.secrets_note,
        metadata={"stream": stream, "url": where, "buckets": ",".join(missing)},
    )
