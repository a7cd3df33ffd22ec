#!/usr/bin/env bash
# Install what the Go and TypeScript clients need, from the repo's own lock files only:
#   - Go modules of clients/go (go.mod + go.sum):            go mod download
#   - protoc-gen-go / protoc-gen-go-grpc, pinned, in .tools/bin (for scripts/gen_clients.sh)
#   - npm packages of clients/ts (package-lock.json):        npm ci (better-sqlite3, for the
#     LangGraph.js tests' SqliteSaver, compiles from source: a few minutes on 2 cores)
# Needs Go >= 1.24 and Node >= 20 with npm. Idempotent: skips what is already in place.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.0
TOOLS="$ROOT/.tools/bin"

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "setup_clients: '$1' is not installed ($2)" >&2
    exit 2
  fi
}
need go "Go 1.24 or newer builds clients/go"
need node "Node.js 20 or newer runs clients/ts"
need npm "npm installs clients/ts from its package-lock.json"

echo "setup_clients: Go modules (clients/go/go.sum)"
(cd clients/go && go mod download && go mod verify >/dev/null)

mkdir -p "$TOOLS"
if [ "$("$TOOLS/protoc-gen-go" --version 2>/dev/null || true)" != "protoc-gen-go $PROTOC_GEN_GO_VERSION" ]; then
  echo "setup_clients: protoc-gen-go@$PROTOC_GEN_GO_VERSION -> .tools/bin"
  GOBIN="$TOOLS" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
fi
if [ "$("$TOOLS/protoc-gen-go-grpc" --version 2>/dev/null || true)" != "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}" ]; then
  echo "setup_clients: protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION -> .tools/bin"
  GOBIN="$TOOLS" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
fi

# npm ci wipes node_modules; skip it when the installed tree matches the lock file.
STAMP=clients/ts/node_modules/.journald-lock.sha256
LOCK_SUM="$(sha256sum clients/ts/package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$LOCK_SUM" ]; then
  echo "setup_clients: npm ci (clients/ts/package-lock.json)"
  (cd clients/ts && npm ci --no-audit --no-fund)
  echo "$LOCK_SUM" >"$STAMP"
fi
echo "setup_clients: ready"
