#!/usr/bin/env bash
# Prove the Go module and the npm package work outside this checkout, installed the way
# their READMEs tell a user to:
#   go   a new module in an empty temp dir requires github.com/journald/journald/clients/go
#        with a `replace` directive pointing at this checkout's clients/go (the module path
#        is not published), then builds and runs scripts/consumers/go;
#   npm  `npm pack` of clients/ts, `npm install` of the tarball into an empty temp dir, then
#        scripts/consumers/ts/consumer.ts is compiled against the installed type
#        declarations and run with node.
# Both consumers check tests/vectors/fingerprint.json and the proto's ErrorCode set.
# Run scripts/setup_clients.sh first (its module and npm caches serve these installs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VECTORS="$ROOT/tests/vectors/fingerprint.json"
MODULE=github.com/journald/journald/clients/go

go_module() {
  mkdir "$WORK/go"
  cp "$ROOT/scripts/consumers/go/main.go" "$WORK/go/"
  cd "$WORK/go"
  go mod init example.com/consumer >/dev/null 2>&1
  go mod edit -require="$MODULE@v0.0.0" -replace="$MODULE=$ROOT/clients/go"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  go run . "$VECTORS"
}

npm_package() {
  local tgz
  tgz="$(cd "$ROOT/clients/ts" && npm pack --silent --pack-destination "$WORK" | tail -n 1)"
  mkdir "$WORK/npm"
  cp "$ROOT/scripts/consumers/ts/consumer.ts" "$WORK/npm/"
  cd "$WORK/npm"
  npm init -y >/dev/null
  npm install --silent --no-audit --no-fund --prefer-offline "$WORK/$tgz"
  cat >tsconfig.json <<JSON
{
  "compilerOptions": {
    "target": "ES2022", "module": "commonjs", "strict": true, "outDir": "out",
    "types": ["node"], "typeRoots": ["$ROOT/clients/ts/node_modules/@types"]
  },
  "files": ["consumer.ts"]
}
JSON
  "$ROOT/clients/ts/node_modules/.bin/tsc" -p tsconfig.json
  node out/consumer.js "$VECTORS"
  # the LangGraph.js entry point is in the tarball and its exports map (loading it needs the
  # peer dependencies @langchain/langgraph-checkpoint and @langchain/core, not installed here)
  node -e 'console.log("npm package entry point: " + require.resolve("@journald/client/langgraph").split("node_modules/")[1])'
}

(go_module)
(npm_package)
