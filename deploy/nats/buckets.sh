#!/bin/sh
# The buckets journald keeps beside a stream (docs/design.md, "Run buckets" and "Leases across
# hosts"): two Object Store buckets for checkpoints, fold marks and attachments, and one KV
# bucket saying which daemon holds each run (per-key TTLs on: a dead daemon's key expires).
# journald never creates them; run this once per stream, after
# `nats stream add --config deploy/nats/stream.json`.
#
# usage: deploy/nats/buckets.sh [STREAM [REPLICAS]]    (default: JOURNALD 1)
# The nats CLI takes the server and credentials from NATS_URL, NATS_CREDS, ... or its context.
set -eu
stream=${1:-JOURNALD}
replicas=${2:-1}
for role in CHECKPOINTS ATTACHMENTS; do
  nats object add "${stream}_${role}" --storage file --replicas "$replicas" --no-compress
done
nats kv add "${stream}_LEASES" --storage file --replicas "$replicas" --history 1 --marker-ttl 1s
