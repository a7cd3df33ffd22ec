"""Every shared-vector name the documentation cites exists in ``tests/vectors``.

A client author reads docs/protocol.md alone and runs the vectors it names first; a name
that is not in the files (a renamed or never-written case) sends them looking for a test
that is not there. A citation is a backticked snake_case name in a paragraph that speaks of
vectors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VECTORS = ROOT / "tests" / "vectors"
DOCS = sorted(
    [
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
        VECTORS / "README.md",
        ROOT / "clients" / "go" / "README.md",
        ROOT / "clients" / "ts" / "README.md",
        ROOT / "clients" / "python" / "README.md",
    ]
)
VECTOR_NAME = re.compile(r"`([a-z0-9]+(?:_[a-z0-9]+){2,})`")


def vector_names() -> set[str]:
    names: set[str] = set()
    for path in VECTORS.glob("*.json"):
        for case in json.loads(path.read_text())["cases"]:
            names.add(case["name"])
    return names


def cited(markdown: str) -> set[str]:
    """Names cited in the paragraphs (or list items) that mention vectors."""
    out: set[str] = set()
    for paragraph in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)", markdown):
        if "vector" in paragraph.lower():
            out.update(VECTOR_NAME.findall(paragraph))
    return out


def test_the_protocol_page_names_vectors_to_run_first() -> None:
    assert cited((ROOT / "docs" / "protocol.md").read_text()) & vector_names()


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda p: p.name)
def test_every_vector_name_a_document_cites_exists(doc: Path) -> None:
    missing = sorted(cited(doc.read_text()) - vector_names())
    assert not missing, f"{doc.relative_to(ROOT)} cites vectors that do not exist: {missing}"
