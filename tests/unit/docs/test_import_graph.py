"""The rooms of journald import each other in one direction: no cycle between packages.

Every module under ``journald/`` and ``clients/python/journald_client/`` is parsed (nothing is
imported) and each import, function-level and ``TYPE_CHECKING`` ones included, becomes an
edge between the rooms of the two modules. A room is a package (``journald.core``,
``journald.server``, ``journald.storage``, ``journald.cli``, ``journald.view``,
``journald.writer``, …, ``journald_client.langgraph``), one of journald's top-level modules
(``journald.clock``), the client's own flat modules together (``journald_client``), or a
``__main__`` (an entry point such as ``python -m journald.cli``, which nothing imports).

Besides no cycles: the daemon's rooms never import ``journald_client`` (the generated stubs
come from ``journald_proto``; only ``journald.cli`` and ``journald.view``, which talk to the
daemon as clients do, use the client), and ``journald.core`` imports none of the rooms that do
I/O.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = {
    "journald": ROOT / "journald",
    "journald_client": ROOT / "clients/python/journald_client",
}
# a package whose top-level modules form one room (the client is one library); journald's
# top-level modules are rooms of their own
FLAT_ROOMS = {"journald_client"}
CLIENT_ROOMS = {"journald.cli", "journald.view"}
IO_ROOMS = {
    "journald.server",
    "journald.storage",
    "journald.cli",
    "journald.view",
    "journald.writer",
}


@dataclass(frozen=True)
class Edge:
    source: str  # room
    target: str  # room
    where: str  # file:line of the import


def _module_name(top: str, base: Path, path: Path) -> tuple[str, bool]:
    parts = [top, *path.relative_to(base).with_suffix("").parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def modules(sources: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Every module name -> (its file, whether it is a package's ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for top, base in sources.items():
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name, is_package = _module_name(top, base, path)
            out[name] = (path, is_package)
    return out


def room_of(module: str, known: dict[str, tuple[Path, bool]]) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[-1] == "__main__":
        return module  # a root package; or an entry point, which nothing imports
    top = parts[0]
    second = f"{top}.{parts[1]}"
    if second in known and known[second][1]:
        return second  # a subpackage
    return top if top in FLAT_ROOMS else second


def imported_modules(
    path: Path, module: str, is_package: bool, known: set[str]
) -> Iterator[tuple[str, int]]:
    """Each module the file imports (resolved against ``known``), with its line."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                child = f"{base}.{alias.name}"
                # ``from pkg import mod`` imports the module pkg.mod, not only pkg
                yield (child if child in known else base), node.lineno


def edges(sources: dict[str, Path]) -> list[Edge]:
    known = modules(sources)
    names = set(known)
    out: list[Edge] = []
    for module, (path, is_package) in known.items():
        source = room_of(module, known)
        for target_module, line in imported_modules(path, module, is_package, names):
            top = target_module.split(".")[0]
            if top not in sources:
                continue  # the standard library, third parties, journald_proto
            target = room_of(target_module, known) if target_module in names else top
            if target != source:
                out.append(Edge(source, target, f"{path.relative_to(ROOT)}:{line}"))
    return out


def find_cycle(graph_edges: list[Edge]) -> list[Edge] | None:
    """One cycle of rooms as the edges that close it, or None."""
    succ: dict[str, list[Edge]] = {}
    for e in graph_edges:
        succ.setdefault(e.source, []).append(e)
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[Edge] = []

    def visit(node: str) -> list[Edge] | None:
        state[node] = 1
        for e in sorted(succ.get(node, []), key=lambda e: (e.target, e.where)):
            if state.get(e.target) == 1:
                start = next(i for i, p in enumerate(path) if p.source == e.target) if path else 0
                loop = [*path[start:], e]
                return loop if loop[0].source == e.target else [e]
            if e.target not in state:
                path.append(e)
                found = visit(e.target)
                if found:
                    return found
                path.pop()
        state[node] = 2
        return None

    for node in sorted(succ):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def describe(cycle: list[Edge]) -> str:
    rooms = " -> ".join([cycle[0].source, *(e.target for e in cycle)])
    return rooms + " (" + "; ".join(f"{e.where} imports {e.target}" for e in cycle) + ")"


def test_no_import_cycle_between_the_rooms() -> None:
    cycle = find_cycle(edges(SOURCES))
    assert cycle is None, "import cycle: " + describe(cycle or [])


def test_the_daemon_never_imports_the_client() -> None:
    bad = [
        e
        for e in edges(SOURCES)
        if e.source.startswith("journald")
        and not e.source.startswith("journald_client")
        and e.source not in CLIENT_ROOMS
        and e.target.startswith("journald_client")
    ]
    assert bad == [], [f"{e.where}: {e.source} imports {e.target}" for e in bad]


def test_importing_the_daemon_loads_no_client_module() -> None:
    code = (
        "import sys, journald.server.daemon, journald.cli.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'journald_client'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_core_imports_no_room_that_does_io() -> None:
    bad = [e for e in edges(SOURCES) if e.source == "journald.core" and e.target in IO_ROOMS]
    assert bad == [], [f"{e.where}: journald.core imports {e.target}" for e in bad]


def test_a_cycle_is_found_and_named_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "journald"
    for sub in ("a", "b", "c"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from journald.b import y\n")
    (pkg / "b" / "y.py").write_text("from ..c import z\n")
    (pkg / "c" / "z.py").write_text("def late():\n    from journald.a import x\n")
    cycle = find_cycle(edges_in(pkg))
    assert cycle is not None
    assert describe(cycle).startswith("journald.a -> journald.b -> journald.c -> journald.a")


def test_an_acyclic_tree_passes(tmp_path: Path) -> None:
    pkg = tmp_path / "journald"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from journald.b import y\nimport journald.b.y\n")
    (pkg / "b" / "y.py").write_text("from . import z\nimport os\n")
    (pkg / "b" / "z.py").write_text("")
    assert find_cycle(edges_in(pkg)) is None


def edges_in(pkg: Path) -> list[Edge]:
    global ROOT
    saved = ROOT
    ROOT = pkg.parent
    try:
        return edges({"journald": pkg})
    finally:
        ROOT = saved
