#!/bin/sh
# The two Object Store buckets journald keeps a stream's checkpoints, fold marks and
# attachments in (docs/design.md, "Run buckets"). journald never creates them; run this once
# per stream, after `nats stream add --config deploy/nats/stream.json`.
#
# usage: deploy/nats/buckets.sh [STREAM [REPLICAS]]    (default: JOURNALD 1)
# The nats CLI takes the server and credentials from NATS_URL, NATS_CREDS, ... or its context.
set -eu
stream=${1:-JOURNALD}
replicas=${2:-1}
for role in CHECKPOINTS ATTACHMENTS; do
  nats object add "${stream}_${role}" --storage file --replicas "$replicas" --no-compress
done
