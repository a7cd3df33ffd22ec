"""Every ``journald/…`` or ``clients/…`` path and every dotted ``journald.x`` /
``journald_client.x`` name in the pages (docs/*.md, README.md, deploy/README.md) and in the
module docstrings under journald/ names something that exists: a file or directory (a ``*``
matches), a module, or a name a module defines. (Links and ``docs/…#anchor`` citations are
test_doc_references.py's.)
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CODE_PATH = re.compile(r"(?<![\w./<>$-])((?:journald|clients)/[\w./*-]*[\w*/])")
DOTTED = re.compile(r"(?<![\w./<>$-])((?:journald|journald_client)(?:\.[A-Za-z_]\w*)+)")
# dotted words that are not Python names: wire names (``journald.v1.JournalService``,
# ``journald.v1.record.meta``) and file names (the socket, systemd units, pages); and the
# names the code spells as strings (``spelled_names``: spans, metrics, attributes, loggers)
NOT_PYTHON = re.compile(r"^journald\.v1\b|\.(sock|service|socket|target|conf|md|json|toml|py)$")
PACKAGES = {"journald": Path("journald"), "journald_client": Path("clients/python/journald_client")}


def pages(root: Path) -> list[Path]:
    found = sorted((root / "docs").glob("*.md"))
    return found + [p for p in (root / "README.md", root / "deploy" / "README.md") if p.is_file()]


def module_docstrings(root: Path) -> Iterator[tuple[Path, str, int]]:
    """(file, docstring, line of the docstring) of every module under journald/."""
    for path in sorted((root / "journald").rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        doc = ast.get_docstring(tree, clean=False)
        if doc is not None:
            yield path, doc, tree.body[0].lineno


@cache
def _defined_names(path: Path) -> frozenset[str]:
    """The names a module binds at its top level (defs, classes, assignments, imports)."""
    tree = ast.parse(path.read_text("utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return frozenset(names)


@cache
def spelled_names(root: Path) -> frozenset[str]:
    """Every string constant under journald/ that looks like a dotted ``journald.`` name: the
    telemetry's span, metric and attribute names, logger names (``journald.run_id``)."""
    out: set[str] = set()
    for path in (root / "journald").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return frozenset(n for n in out if re.fullmatch(r"journald(\.\w+)+", n))


def _module_file(root: Path, parts: list[str]) -> Path | None:
    base = root / PACKAGES[parts[0]]
    target = base.joinpath(*parts[1:])
    if (target / "__init__.py").is_file():
        return target / "__init__.py"
    if target.with_suffix(".py").is_file():
        return target.with_suffix(".py")
    return None


def dotted_exists(root: Path, dotted: str) -> bool:
    """A module, or a module followed by a name it defines (then anything: attributes)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module_file(root, parts[:cut])
        if found is not None:
            return cut == len(parts) or parts[cut] in _defined_names(found)
    return False


def path_exists(root: Path, path: str) -> bool:
    if "*" in path:
        return any(root.glob(path.rstrip("/")))
    return (root / path).exists()


def code_problems_in(rel: str, text: str, first_line: int, root: Path) -> Iterator[str]:
    for no, line in enumerate(text.splitlines(), first_line):
        for m in CODE_PATH.finditer(line):
            path = m.group(1).rstrip(".")
            if not path_exists(root, path):
                yield f"{rel}:{no}: {path} does not exist"
        for m in DOTTED.finditer(line):
            name = m.group(1)
            if NOT_PYTHON.search(name) or name in spelled_names(root):
                continue
            if m.end() < len(line) and line[m.end()] == "/":
                continue  # a path that starts with a dotted directory name
            if not dotted_exists(root, name):
                yield f"{rel}:{no}: {name} names no module or name of one"


def code_reference_problems(root: Path) -> list[str]:
    out: list[str] = []
    for page in pages(root):
        rel = str(page.relative_to(root))
        out.extend(code_problems_in(rel, page.read_text("utf-8"), 1, root))
    for path, doc, line in module_docstrings(root):
        out.extend(code_problems_in(str(path.relative_to(root)), doc, line, root))
    return out


def test_every_path_and_module_named_in_the_docs_and_docstrings_exists() -> None:
    assert code_reference_problems(ROOT) == []


def test_finds_each_path_module_and_name_that_does_not_exist(tmp_path: Path) -> None:
    server = tmp_path / "journald" / "server"
    server.mkdir(parents=True)
    client = tmp_path / "clients" / "python" / "journald_client"
    client.mkdir(parents=True)
    for init in (tmp_path / "journald", server, client):
        (init / "__init__.py").write_text("")
    (server / "edge.py").write_text(
        '"""See ``journald.server.errors_edge``."""\ndef to_status(): ...\n'
    )
    (server / "runs.py").write_text('SPAN_ATTRIBUTE = "journald.run_id"\n')
    (client / "state.py").write_text("class RunState: ...\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text(
        "`journald/server/edge.py` (`journald.server.edge.to_status`), `journald/server/*.py`,\n"
        "`journald/server/folding.py`, `journald/storage/jetstream_*.py`, `journald.run_id`,\n"
        "`journald_client.state.RunState`, `journald_client.state.PendingTurn`, "
        "`journald.v1.JournalService`, `$XDG_RUNTIME_DIR/journald/journald.sock`\n",
        encoding="utf-8",
    )
    assert code_reference_problems(tmp_path) == [
        "docs/design.md:2: journald/server/folding.py does not exist",
        "docs/design.md:2: journald/storage/jetstream_*.py does not exist",
        "docs/design.md:3: journald_client.state.PendingTurn names no module or name of one",
        "journald/server/edge.py:1: journald.server.errors_edge names no module or name of one",
    ]


TEST_PATH = re.compile(r"(?<![\w./<>$-])(tests/[\w/]+\.py)")
# a pattern spelled with a placeholder, not a file (``tests/storage/backend_NAME.py``)
PLACEHOLDER = re.compile(r"[A-Z]{3,}")
SOURCE_SUFFIXES = (".py", ".go", ".ts", ".md", ".sh", ".toml")


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under ``root`` (build outputs such as clients/ts/dist are not
    sources), or every file when ``root`` is not a checkout (the checker's own test)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=False
    )
    if listed.returncode != 0 or not (root / ".git").exists():
        return sorted(p for p in root.rglob("*") if p.is_file())
    return sorted(root / name for name in listed.stdout.decode().split("\0") if name)


def named_test_file_problems(root: Path) -> list[str]:
    """Every ``tests/….py`` named outside tests/ (code comments, docs, scripts) exists: the
    tests move with the packages they mirror, and a comment pointing at a moved test sends
    the reader nowhere."""
    out: list[str] = []
    for path in tracked_files(root):
        rel = path.relative_to(root)
        if rel.parts[0] == "tests" or path.suffix not in SOURCE_SUFFIXES:
            continue
        for no, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
            for m in TEST_PATH.finditer(line):
                named = m.group(1)
                if not PLACEHOLDER.search(named) and not (root / named).is_file():
                    out.append(f"{rel}:{no}: {named} does not exist")
    return out


def test_every_test_file_named_outside_the_tests_exists() -> None:
    assert named_test_file_problems(ROOT) == []


def test_a_comment_naming_a_moved_test_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "core" / "test_fold.py").write_text("")
    (tmp_path / "journald").mkdir()
    (tmp_path / "journald" / "fold.py").write_text(
        "# see tests/unit/core/test_fold.py and tests/unit/test_fold.py\n"
        "# one per backend: tests/storage/backend_NAME.py\n"
    )
    assert named_test_file_problems(tmp_path) == [
        "journald/fold.py:1: tests/unit/test_fold.py does not exist"
    ]
