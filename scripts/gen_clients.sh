#!/usr/bin/env bash
# Generate the Go and TypeScript stubs from proto/ with the pinned plugins (buf.gen.yaml).
#
#   scripts/gen_clients.sh           regenerate clients/go/journaldv1 and clients/ts/src/gen
#   scripts/gen_clients.sh --check   exit 1 if the committed generated code is stale
#
# Needs scripts/setup_clients.sh to have run (pinned protoc-gen-go/-go-grpc in .tools/bin,
# ts-proto in clients/ts/node_modules) and buf in .venv/bin (make setup).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUF="${BUF:-}"
if [ -z "$BUF" ]; then
  if [ -x "$ROOT/.venv/bin/buf" ]; then BUF="$ROOT/.venv/bin/buf"; else BUF=buf; fi
fi
export PATH="$ROOT/.tools/bin:$ROOT/clients/ts/node_modules/.bin:$PATH"
OUTPUTS=(clients/go/journaldv1 clients/ts/src/gen)

for tool in "$BUF" protoc-gen-go protoc-gen-go-grpc protoc-gen-ts_proto; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "gen_clients: $tool not found; run scripts/setup_clients.sh (and make setup for buf)" >&2
    exit 2
  fi
done

case "${1:-}" in
  "")
    rm -rf "${OUTPUTS[@]}"
    "$BUF" generate --template buf.gen.yaml
    echo "generated: ${OUTPUTS[*]}"
    ;;
  --check)
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$BUF" generate --template buf.gen.yaml -o "$tmp"
    stale=0
    for out in "${OUTPUTS[@]}"; do
      if ! diff -r "$tmp/$out" "$out" >"$tmp/diff.txt" 2>&1; then
        echo "gen_clients: $out is stale; run scripts/gen_clients.sh and commit:" >&2
        head -40 "$tmp/diff.txt" >&2
        stale=1
      fi
    done
    if [ "$stale" -ne 0 ]; then exit 1; fi
    echo "generated clients are current"
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac
