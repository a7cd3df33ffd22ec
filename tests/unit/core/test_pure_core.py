"""The pure core (every module of ``journald/core/``) must not do I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.docs.test_import_graph import SOURCES, imported_modules, modules

PKG = Path(__file__).resolve().parents[3] / "journald" / "core"
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


def _outside_the_core(path: Path) -> set[str]:
    """The ``journald`` modules ``path`` imports that are not modules of ``journald/core``."""

    def inside(name: str) -> bool:
        parts = name.split(".")
        return parts[:2] == ["journald", "core"] and (len(parts) == 2 or parts[2] in CORE)

    known = set(modules(SOURCES))
    imported = {
        name for name, _ in imported_modules(path, f"journald.core.{path.stem}", False, known)
    }
    return {name for name in imported if name.split(".")[0] == "journald" and not inside(name)}


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_nothing_that_does_io(module: str) -> None:
    names = _imports(PKG / f"{module}.py") - PACKAGE_DATA_READS.get(module, set())
    assert not names & (FORBIDDEN | {"open", "__import__"}), names & FORBIDDEN


@pytest.mark.parametrize("module", CORE)
def test_core_modules_import_only_other_core_modules(module: str) -> None:
    outside = _outside_the_core(PKG / f"{module}.py")
    assert not outside, f"journald/core/{module}.py imports {sorted(outside)}"


def test_the_io_check_would_catch_a_forbidden_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import os.path\nfrom asyncio import sleep\nx = open('f')\n")
    assert {"os", "asyncio", "open"} <= _imports(sneaky)


def test_the_dependency_check_would_catch_an_import_from_outside_the_core(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "import journald.server.runs\n"
        "from journald import telemetry\n"
        "from journald.storage.base import Store\n"
        "from ..view import model\n"
        "from . import fold\n"
        "from journald.core import paging\n"
        "from journald.core.records import Record\n"
    )
    assert _outside_the_core(sneaky) == {
        "journald.server.runs",
        "journald.telemetry",
        "journald.storage.base",
        "journald.view.model",
    }


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
