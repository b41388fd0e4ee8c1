"""Sources live in the repository: no citation of the team's research folder, every anchor exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"docs/sources\.md#([\w-]+)")
OUTSIDE = re.compile(r"(?<![\w.-])research/\w+\.md|shared/data/")


def _files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in ("src", "bench", "docs"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".csv"}]
    return found


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_cited_section_exists():
    anchors = {_anchor(line.lstrip("#")) for line in (ROOT / "docs" / "sources.md").read_text().splitlines()
               if line.startswith("#")}
    cited = {(p.relative_to(ROOT).as_posix(), a) for p in _files() for a in CITED.findall(p.read_text())}
    assert len(cited) >= 10
    missing = sorted(c for c in cited if c[1] not in anchors)
    assert not missing, f"docs/sources.md has no such heading: {missing}"


def test_nothing_cites_a_folder_users_do_not_have():
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in _files()
                 for n, line in enumerate(p.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not offenders, f"cite docs/sources.md instead of the team's research/ or shared/data: {offenders}"
