"""The docs a third party reads name paths relative to the repository, and cite nothing it
cannot see (no machine's absolute paths, no sections of our private spec)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: Absolute paths of one machine: a checkout, a home, a scratch directory.
ABSOLUTE = re.compile(r"(?<![\w.])/(?:work|root|home|Users|tmp|opt|srv)/[\w.-]+")
PRIVATE = re.compile(r"SPEC(?:\.md| §)|shared/seeds|STYLE\.md")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_absolute_paths(doc: Path) -> None:
    found = ABSOLUTE.findall(doc.read_text(encoding="utf-8"))
    assert found == [], f"{doc.name} names absolute paths: {found}"


@pytest.mark.parametrize(
    "doc",
    [ROOT / "docs" / "contributing.md", ROOT / "docs" / "writing-a-driver.md"],
    ids=lambda p: p.name,
)
def test_no_private_citations(doc: Path) -> None:
    found = PRIVATE.findall(doc.read_text(encoding="utf-8"))
    assert found == [], f"{doc.name} cites what a third party cannot see: {found}"
