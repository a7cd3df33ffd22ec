#!/usr/bin/env bash
# Check and test the Go and TypeScript clients; exits non-zero if any step fails.
#   1. generated stubs are current (scripts/gen_clients.sh --check; needs buf from make setup)
#   2. clients/go: gofmt, go vet ./..., go test ./...   (shared vectors, errors, socket rules)
#   3. clients/ts: npm test                              (tsc, node --test, then vitest: the
#      LangGraph.js saver's tests and LangGraph's checkpoint validation suite, each against a
#      real `journald serve` they start on a temp socket and stop by its pid: the checkout's
#      .venv/bin/journald from `make setup`, or $JOURNALD_BIN)
#   4. both packages used outside the checkout            (scripts/check_client_packages.sh)
# Run scripts/setup_clients.sh first. The cross-language test against a real daemon is
# tests/integration/client/test_polyglot.py (pytest).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
failed=()

step() {
  local name="$1"
  shift
  echo "== $name"
  if ! "$@"; then
    failed+=("$name")
  fi
}

gofmt_clean() {
  local out
  out="$(cd clients/go && gofmt -l .)"
  if [ -n "$out" ]; then
    echo "gofmt: not formatted: $out" >&2
    return 1
  fi
}

step "generated stubs current" scripts/gen_clients.sh --check
step "gofmt" gofmt_clean
step "go vet" bash -c 'cd clients/go && go vet ./...'
step "go test" bash -c 'cd clients/go && go test -count=1 ./...'
step "npm test" bash -c 'cd clients/ts && npm test --silent'
step "packages outside the checkout" scripts/check_client_packages.sh

if [ "${#failed[@]}" -ne 0 ]; then
  echo "test_clients: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test_clients: all client checks passed"
