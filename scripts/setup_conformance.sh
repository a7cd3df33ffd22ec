#!/usr/bin/env bash
# Build the third-language conformance writer (conformance/cpp), a C++ program generated from
# proto/journald/v1/journal.proto with no journald client library. It is run against a real
# daemon by tests/integration/client/test_conformance_cpp.py (pytest, part of `make test`).
#
# Needs Debian's gRPC C++ packages; installs them with apt-get when missing and running as
# root (CI), otherwise prints the command. Rebuilds only when the proto or the source changed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SRC=conformance/cpp
OUT=$SRC/build
BIN=$OUT/journald-conformance
PACKAGES=(g++ pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libssl-dev)

have_toolchain() {
  command -v g++ >/dev/null && command -v protoc >/dev/null && command -v grpc_cpp_plugin >/dev/null &&
    pkg-config --exists grpc++ protobuf libcrypto 2>/dev/null
}

if ! have_toolchain; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup_conformance: the gRPC C++ toolchain is missing; install it with:" >&2
    echo "  sudo apt-get install -y --no-install-recommends ${PACKAGES[*]}" >&2
    exit 2
  fi
  # Two suites set up side by side on a new machine both get here, and dpkg's own lock refuses
  # the second at once ("Could not get lock"): the second waits for the first under this lock,
  # then finds the toolchain installed. Lock::Timeout covers any other apt-get on the machine.
  exec 9>/var/lock/journald-setup-apt.lock
  flock 9
  if ! have_toolchain; then
    missing=()  # only what is absent: an installed package is left at its version
    for pkg in "${PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    echo "setup_conformance: apt-get install ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends "${missing[@]}" >/dev/null
  fi
  exec 9>&-
fi

STAMP="$OUT/.source.sha256"
SUM="$(cat proto/journald/v1/journal.proto "$SRC/writer.cc" "$0" | sha256sum | cut -d' ' -f1)"
if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null || true)" = "$SUM" ]; then
  echo "setup_conformance: $BIN is current"
  exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT/gen"
echo "setup_conformance: protoc (C++ messages and gRPC stubs) -> $OUT/gen"
protoc -I proto --cpp_out="$OUT/gen" --grpc_out="$OUT/gen" \
  --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" journald/v1/journal.proto
echo "setup_conformance: g++ -> $BIN"
read -r -a CFLAGS <<<"$(pkg-config --cflags grpc++ protobuf libcrypto)"
read -r -a LIBS <<<"$(pkg-config --libs grpc++ protobuf libcrypto)"
# The three translation units compile side by side (CI has 2 cores), then link.
pids=()
for unit in "$SRC/writer.cc" "$OUT/gen/journald/v1/journal.pb.cc" "$OUT/gen/journald/v1/journal.grpc.pb.cc"; do
  g++ -std=c++17 -O1 -I "$OUT/gen" "${CFLAGS[@]}" -c "$unit" -o "$OUT/$(basename "$unit" .cc).o" &
  pids+=("$!")
done
for pid in "${pids[@]}"; do wait "$pid"; done
g++ -o "$BIN" "$OUT"/*.o "${LIBS[@]}"
echo "$SUM" >"$STAMP"
echo "setup_conformance: built $BIN"
