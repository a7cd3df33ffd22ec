"""The pure core (every module of ``journald/core/``) must not do I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "journald" / "core"
CORE = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
FORBIDDEN = {
    "os",
    "io",
    "asyncio",
    "grpc",
    "nats",
    "aiofiles",
    "socket",
    "pathlib",
    "shutil",
    "subprocess",
    "tempfile",
    "threading",
    "select",
    "selectors",
    "mmap",
    "fcntl",
    "sqlite3",
    "urllib",
    "http",
    "requests",
    "importlib",
    "builtins",
    "sys",
    "time",
    "datetime",
    "random",
    "journald_client",
}
# The one read a core module makes: core/schema.py loads the published JSON Schema, a data
# file of the package itself (journald/schemas/records.v1.json), with importlib.resources.
PACKAGE_DATA_READS = {"schema": {"importlib"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"open", "__import__"}:
            names.add(node.func.id)  # type: ignore[attr-defined]
    return names


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_nothing_that_does_io(module: str) -> None:
    names = _imports(PKG / f"{module}.py") - PACKAGE_DATA_READS.get(module, set())
    assert not names & (FORBIDDEN | {"open", "__import__"}), names & FORBIDDEN
    # Core modules may only import the standard pure helpers and each other.
    journald_deps = {n for n in names if n == "journald"}
    assert journald_deps <= {"journald"}


def test_core_modules_import_only_other_core_modules() -> None:
    for module in CORE:
        tree = ast.parse((PKG / f"{module}.py").read_text("utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("journald.")
                and node.module != "journald.core"
            ):
                assert node.module.startswith("journald.core."), f"{module} imports {node.module}"
                assert node.module.split(".")[2] in CORE, f"{module} imports {node.module}"


def test_the_io_check_would_catch_a_forbidden_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import os.path\nfrom asyncio import sleep\nx = open('f')\n")
    assert {"os", "asyncio", "open"} <= _imports(sneaky)


def test_the_core_holds_the_modules_the_design_calls_pure() -> None:
    assert {"records", "fold", "fingerprint", "governance", "errors", "admission", "paging"} <= set(
        CORE
    )


def test_the_one_package_data_read_is_the_published_schema() -> None:
    tree = ast.parse((PKG / "schema.py").read_text("utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("importlib") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "importlib":
            assert [a.name for a in node.names] == ["resources"]
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "resources":
            assert node.attr == "files"
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "files":
            assert [ast.literal_eval(a) for a in node.args] == ["journald.schemas"]
