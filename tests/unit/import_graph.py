"""Which ``journald`` modules a source file imports, read from its syntax tree (nothing is
imported): for checks of who may depend on whom (tests/unit/core/test_pure_core.py)."""

from __future__ import annotations

import ast
from pathlib import Path


def journald_imports(path: Path, package: str) -> set[str]:
    """Every ``journald`` module the file imports, spelled in full: ``import journald.x``,
    ``from journald.x import y``, ``from journald import x`` (``journald.x``), and relative
    imports resolved against ``package`` (the dotted package the file is in)."""
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "journald")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            if base.split(".")[0] != "journald":
                continue
            if base in ("journald", package):  # ``from journald.core import fold``: a module
                found.update(f"{base}.{a.name}" for a in node.names)
            else:
                found.add(base)
    return found
