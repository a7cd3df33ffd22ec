"""Generate the Python stubs from proto/ into the journald_proto distribution (the one copy).

The daemon and the client both import `journald_proto` (proto/python); `journald_client.pb`
only re-exports it for users. protoc writes absolute imports (`from journald.v1 import
journal_pb2`) that would collide with the daemon package `journald`, so imports between
generated modules are rewritten to relative ones. The hand-written modules of the package
(HAND_WRITTEN) are neither generated nor removed.

    python scripts/gen_proto.py           # regenerate
    python scripts/gen_proto.py --check   # exit 1 if the checked-in stubs are stale
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "proto" / "python" / "journald_proto"
HAND_WRITTEN = frozenset({"conventions.py"})
PROTOS = ["journald/v1/journal.proto"]
BIN = Path(sys.executable).parent
_IMPORT = re.compile(rb"^from journald\.v1 import (\w+)", re.MULTILINE)


def generate(dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--plugin=protoc-gen-mypy={BIN / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={BIN / 'protoc-gen-mypy_grpc'}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *PROTOS,
        ]
        subprocess.run(cmd, check=True, cwd=ROOT)
        dest.mkdir(parents=True, exist_ok=True)
        for src in sorted((Path(tmp) / "journald" / "v1").iterdir()):
            text = _IMPORT.sub(rb"from . import \1", src.read_bytes())
            (dest / src.name).write_bytes(text)
        (dest / "__init__.py").write_text(
            '"""Generated protobuf/gRPC stubs of proto/journald/v1/journal.proto. Do not edit;'
            ' run `make gen`."""\n'
        )
        (dest / "py.typed").write_text("")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if stubs are stale")
    args = parser.parse_args()
    if not args.check:
        if OUT.exists():
            for path in OUT.iterdir():
                if path.name in HAND_WRITTEN:
                    continue
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "pb"
        generate(fresh)
        stale = [
            p.name
            for p in sorted(fresh.iterdir())
            if not (OUT / p.name).exists() or (OUT / p.name).read_bytes() != p.read_bytes()
        ]
        extra = [
            p.name
            for p in OUT.iterdir()
            if p.is_file() and p.name not in HAND_WRITTEN and not (fresh / p.name).exists()
        ]
        if stale or extra:
            print(
                f"generated stubs are stale: {stale + extra}; run `make gen` and commit",
                file=sys.stderr,
            )
            return 1
    print("generated stubs are current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
