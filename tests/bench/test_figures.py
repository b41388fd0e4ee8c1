"""README and bench/README figures are the ones in bench/results/*.json (bench/render_figures.py)."""

from __future__ import annotations

import json
import shutil


def test_docs_match_the_results_files(bench):
    rf = bench("render_figures")
    for path, text in rf.rendered().items():
        assert path.read_text() == text, f"{path.name} differs from bench/results: run bench/render_figures.py"


def test_a_changed_result_changes_the_readme(bench, tmp_path, monkeypatch):
    rf = bench("render_figures")
    for f in rf.RESULTS.glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    doc = json.loads((tmp_path / "multi_gpu_accuracy.json").read_text())
    doc["not_fitted"]["median_abs_error"] = 0.777
    (tmp_path / "multi_gpu_accuracy.json").write_text(json.dumps(doc))
    monkeypatch.setattr(rf, "RESULTS", tmp_path)
    table = rf.readme_table()
    assert "| 77.7% / " in table
    readme = rf.REPO / "README.md"
    assert rf.rendered()[readme] != readme.read_text()
