"""Sources live in the repository: no citation of the team's research folder, every anchor exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"docs/sources\.md#([\w-]+)")
# The team's research notes (../shared/research/*.md), which users do not have: a citation of one, with or
# without its folder ("cloud_costs.md s7"), points nowhere. Notes added there later are read from the folder.
RESEARCH = ROOT.parent / "shared" / "research"
NOTES = {"cloud_costs", "finetune_frameworks", "memory_simulation", "peers", "peers_2026", "style_anchors",
         "vram_estimators"} | ({p.stem for p in RESEARCH.glob("*.md")} if RESEARCH.is_dir() else set())
OUTSIDE = re.compile(rf"(?<![\w.-])research/\w+\.md|shared/data/|(?<![\w./-])(?:{'|'.join(sorted(NOTES))})\.md\b")


TEXT_SUFFIXES = {".py", ".md", ".yaml", ".csv", ".json", ".toml", ".txt"}


def _files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in ("src", "bench", "docs", "examples"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in TEXT_SUFFIXES]
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


def test_the_pattern_catches_bare_and_foldered_note_names():
    for line in ("# Boards (cloud_costs.md s7: Azure ...)", "see research/vram_estimators.md", "../shared/data/x.csv",
                 "source,cloud_costs.md s1.5,2026-01-01"):
        assert OUTSIDE.search(line), line
    for line in ("docs/sources.md#azure", "https://example.com/research/amd-inference-economics",
                 "my_cloud_costs.md", "docs/cloud_costs.md"):
        assert not OUTSIDE.search(line), line
