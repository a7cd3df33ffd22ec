"""Every documentation reference resolves: no citation of the old design notes, no link or
``docs/<page>.md#anchor`` citation to a file or heading that does not exist.

Code, proto and test comments cite ``docs/design.md`` and ``docs/protocol.md`` by section
anchor (``docs/protocol.md#canonical-json``); markdown files link each other relatively. An
anchor is the GitHub slug of a heading (lower case, punctuation dropped, spaces to ``-``,
``-1``, ``-2`` … for repeats), so a renamed heading breaks the citations of it here first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
ROOT = SELF.parents[3]
SKIP_DIRS = {".git", ".venv", "node_modules", ".tools", ".mypy_cache", ".ruff_cache", "dist"}
SKIP_DIRS |= {".pytest_cache", ".hypothesis", "__pycache__", "build"}
TEXT_SUFFIXES = {".py", ".pyi", ".go", ".ts", ".proto", ".md", ".sh", ".yaml", ".yml", ".toml"}
TEXT_SUFFIXES |= {".json", ".txt", ".cc", ".h", ".service", ".conf", ".cfg"}
TEXT_NAMES = {"Makefile", "run"}
OLD_CITATION = "SPEC" + " §"  # spelled apart so this file does not cite it

DOC_CITATION = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@cache
def _anchors(path: Path) -> frozenset[str]:
    return frozenset(anchors_of(path.read_text(encoding="utf-8")))


def problems_in(path: Path, text: str, root: Path) -> Iterator[str]:
    """Each dangling reference of one file, as ``file:line: what``."""
    rel = path.relative_to(root)
    for no, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{no}"
        if OLD_CITATION in line:
            yield f"{where}: cites the design notes by section number; cite docs/*.md#anchor"
        # in markdown, link targets are checked below, relative to the file
        cited = MD_LINK.sub("]()", line) if path.suffix == ".md" else line
        for m in DOC_CITATION.finditer(cited):
            target = root / "docs" / m.group(1)
            if not target.is_file():
                yield f"{where}: docs/{m.group(1)} does not exist"
            elif m.group(2) and m.group(2) not in _anchors(target):
                yield f"{where}: docs/{m.group(1)} has no heading #{m.group(2)}"
        if path.suffix != ".md":
            continue
        for m in MD_LINK.finditer(line):
            link = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # http:, mailto:, …
                continue
            file_part, _, anchor = link.partition("#")
            target = (path.parent / file_part).resolve() if file_part else path
            if not target.exists():
                yield f"{where}: link to missing file {file_part}"
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                yield f"{where}: {file_part or rel.name} has no heading #{anchor}"


def text_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            p = Path(dirpath) / name
            if p == SELF:  # its examples dangle on purpose
                continue
            if p.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                yield p


def repo_problems(root: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(text_files(root)):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        out.extend(problems_in(path, text, root))
    return out


def test_every_doc_reference_in_the_repository_resolves() -> None:
    assert repo_problems(ROOT) == []


def test_the_design_and_protocol_pages_exist_with_the_sections_code_cites() -> None:
    assert {"canonical-json", "error-codes", "seq-rules", "admission-rules"} <= _anchors(
        ROOT / "docs" / "protocol.md"
    )
    assert {"fold", "leases", "file-backend", "fsync-order", "recovery"} <= _anchors(
        ROOT / "docs" / "design.md"
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Canonical JSON\n\n```\n## not a heading\n```\n\n## Errors\n\n## Errors\n"
        "See [the other page](other.md#top) and [json](#canonical-json).\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "other.md").write_text("# Top\n", encoding="utf-8")
    return tmp_path


def test_anchors_follow_github_slugs_including_repeats_and_skip_code_fences() -> None:
    text = "# A `code` Title!\n## Open and the lease\n```\n# fenced\n```\n## Errors\n## Errors\n"
    assert anchors_of(text) == {"a-code-title", "open-and-the-lease", "errors", "errors-1"}


def test_a_clean_tree_has_no_problems(tree: Path) -> None:
    (tree / "code.py").write_text("# see docs/guide.md#canonical-json\n", encoding="utf-8")
    assert repo_problems(tree) == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.py", "# rules: " + OLD_CITATION + "3\n", "cites the design notes"),
        ("b.go", "// see docs/guide.md#no-such-heading\n", "has no heading #no-such-heading"),
        ("c.proto", "// see docs/missing.md#x\n", "docs/missing.md does not exist"),
        ("d.md", "[gone](docs/nothing.md)\n", "link to missing file docs/nothing.md"),
        ("e.md", "[bad](docs/guide.md#nope)\n", "docs/guide.md has no heading #nope"),
        ("f.md", "# F\n[self](#absent)\n", "f.md has no heading #absent"),
    ],
)
def test_finds_each_kind_of_dangling_reference(
    tree: Path, name: str, text: str, expected: str
) -> None:
    (tree / name).write_text(text, encoding="utf-8")
    found = repo_problems(tree)
    assert len(found) == 1, found
    assert found[0].startswith(f"{name}:")
    assert expected in found[0]
