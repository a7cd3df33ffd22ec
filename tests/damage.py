"""Damage done to a file-backend run from outside, shared by the scrubber's and the file
store's tests."""

from __future__ import annotations

import json
import os
from pathlib import Path


def alter_manifest_entry(run: Path) -> None:
    """Change what the manifest says segment 1 ends in, keeping its size and times (only the
    ctime tells: ``os.utime`` cannot set it)."""
    path = run / "manifest.json"
    st = path.stat()
    doc = json.loads(path.read_bytes())
    h = doc["segments"][0]["last_hash"]
    doc["segments"][0]["last_hash"] = ("0" if h[0] != "0" else "1") + h[1:]
    data = json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n"
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
