#!/usr/bin/env bash
# Fail when proto/ breaks the wire contract recorded in proto/baseline/journald.binpb
# (buf breaking, rules from buf.yaml). CI runs this through `make check-proto`.
#
# An intended change (new fields/RPCs are not breaking; renames, removals, renumbering,
# type changes are): see proto/baseline/README.md, then refresh the baseline with
#   scripts/check_proto_breaking.sh --update
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUF="${BUF:-}"
if [ -z "$BUF" ]; then
  if [ -x "$ROOT/.venv/bin/buf" ]; then BUF="$ROOT/.venv/bin/buf"; else BUF=buf; fi
fi
BASELINE=proto/baseline/journald.binpb

case "${1:-}" in
  --update)
    "$BUF" build proto --exclude-source-info -o "$BASELINE"
    echo "baseline refreshed: $BASELINE (commit it with the proto change)"
    ;;
  "")
    if [ ! -f "$BASELINE" ]; then
      echo "check_proto_breaking: $BASELINE is missing" >&2
      exit 2
    fi
    "$BUF" breaking proto --against "$BASELINE"
    echo "proto contract: no breaking change against $BASELINE"
    ;;
  *)
    echo "usage: $0 [--update]" >&2
    exit 2
    ;;
esac
