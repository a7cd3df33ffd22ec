#!/usr/bin/env bash
# Build natscli (the `nats` command), pinned, into .tools/bin from the Go module proxy.
# The tests run the `nats stream ...` fixes journald prints with this exact binary
# (tests/natscli.py calls this script when the binary is missing or another version).
# Needs Go (natscli v0.5.0 asks for Go 1.26: an older `go` fetches that toolchain itself).
# Idempotent: does nothing when .tools/bin/nats already is the pinned version.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

NATSCLI_VERSION=v0.5.0
TOOLS="$ROOT/.tools/bin"

if [ "$("$TOOLS/nats" --version 2>/dev/null || true)" = "$NATSCLI_VERSION" ]; then
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup_natscli: 'go' is not installed; it builds natscli $NATSCLI_VERSION (the nats CLI the tests run journald's printed stream fixes with); install Go from https://go.dev/dl/" >&2
  exit 2
fi
echo "setup_natscli: natscli@$NATSCLI_VERSION -> .tools/bin (a few minutes the first time)" >&2
mkdir -p "$TOOLS"
GOBIN="$TOOLS" go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
got="$("$TOOLS/nats" --version 2>/dev/null || true)"
if [ "$got" != "$NATSCLI_VERSION" ]; then
  echo "setup_natscli: built .tools/bin/nats reports '$got', not $NATSCLI_VERSION" >&2
  exit 1
fi
