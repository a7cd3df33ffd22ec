"""The KV bucket of cross-host leases, ``<STREAM>_LEASES``: its name, the ``nats kv add`` line
that makes it, and the check of an existing one (docs/design.md#leases-across-hosts).

journald never creates the bucket: the operator does, like the run buckets
(deploy/nats/buckets.sh). ``bind_lease_bucket`` refuses a missing or unsafe one with the
commands that fix it. Apart from ``jetstream.leases`` (the leases held in the bucket and their
renewal) because this runs once, at start-up, before any lease, and is what the deployment
checks (``jetstream.buckets``) share.
"""

from __future__ import annotations

import shlex
from typing import Any

import nats.js.errors

from journald.storage.jetstream.buckets import BucketConfigError
from journald.storage.jetstream.config import Cli, _enum
from journald.storage.jetstream.connect import answered
from journald.storage.jetstream.errors import answered_or_unavailable

LEASES = "LEASES"


def lease_bucket_name(stream: str) -> str:
    return f"{stream}_{LEASES}"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


def kv_add_command(bucket: str, replicas: int = 1, *, cli: Cli | None = None) -> str:
    """A ready ``nats kv add`` line for the lease bucket as deploy/nats/buckets.sh makes it
    (``--marker-ttl`` turns on per-message TTLs, which the daemon keys need)."""
    return (
        f"{(cli or Cli()).nats} kv add {shlex.quote(bucket)} --storage file "
        f"--replicas {replicas} --history 1 --marker-ttl 1s"
    )


def lease_bucket_problems(cfg: Any, replicas: int) -> tuple[list[str], list[str]]:
    """(what is unsafe, the ``nats kv edit`` flags that fix it; empty when one cannot be
    edited) for the lease bucket's stream config."""
    problems: list[str] = []
    flags: list[str] = []
    fixed_by_edit = True
    storage = _enum(cfg, "storage") or "file"
    if storage != "file":
        problems.append(f"storage is {storage}, journald needs file (leases survive a restart)")
        fixed_by_edit = False
    have = int(getattr(cfg, "num_replicas", 1) or 1)
    if have < replicas:
        problems.append(
            f"it has {have} replica(s), journald needs at least the stream's {replicas}"
        )
        flags.append(f"--replicas={replicas}")
    if (getattr(cfg, "max_age", None) or 0) > 0:
        problems.append("entries expire (TTL); a run's entry must live as long as its holder")
        flags.append("--ttl=0s")
    if not getattr(cfg, "allow_msg_ttl", False):
        problems.append("per-key TTLs are off; a dead daemon's key could never expire")
        flags.append("--marker-ttl=1s")
    if getattr(cfg, "sealed", False):
        problems.append("the bucket is sealed (read-only)")
        fixed_by_edit = False
    return problems, flags if fixed_by_edit else []


async def bind_lease_bucket(
    nc: Any,
    stream: str,
    where: str,
    cli: Cli,
    *,
    replicas: int,
    ack_timeout_s: float,
    leader_wait_s: float = 0.0,
) -> str:
    """The checked lease bucket of ``stream`` (its name), or ``BucketConfigError`` with the
    commands that make it."""
    bucket = lease_bucket_name(stream)
    jsm = nc.jsm(timeout=ack_timeout_s)
    meta = {"bucket": bucket, "stream": stream, "url": where}
    with answered_or_unavailable(where, f"the info request for bucket {bucket}"):
        try:
            info = await answered(
                f"the info request for bucket {bucket}",
                where,
                lambda: jsm.stream_info(kv_stream(bucket)),
                leader_wait_s,
            )
        except nats.js.errors.NotFoundError:  # absent: configuration, with its fix
            raise BucketConfigError(
                f"bucket {bucket} does not exist on {where}; stream {stream} keeps who holds "
                "each run there (one writer per run across hosts) and journald never creates it",
                [kv_add_command(bucket, replicas, cli=cli)],
                note=cli.secrets_note,
                metadata=meta,
            ) from None
    problems, flags = lease_bucket_problems(info.config, replicas)
    if not problems:
        return bucket
    what = f"bucket {bucket} is not safe for journald: " + "; ".join(problems)
    if flags:
        fixes = [f"{cli.nats} kv edit {shlex.quote(bucket)} " + " ".join(flags)]
    else:  # leases are soft state: a bucket is recreated without losing any run
        fixes = [
            f"{cli.nats} kv rm {shlex.quote(bucket)} -f",
            kv_add_command(bucket, replicas, cli=cli),
        ]
        what += "; the setting cannot be edited: stop every journald on the stream, recreate it"
    raise BucketConfigError(what, fixes, note=cli.secrets_note, metadata=meta)
