"""bench/job_accuracy.py: whole jobs, predicted with constants fitted on the other sources' throughput rows."""

from __future__ import annotations

import csv

import pytest

TINY = {"e_max": (0.5, 0.8), "tokens_half": (300,), "hidden_half": (600,), "full": (0.001,), "adapter": (0.001,)}


def test_tokens_are_stated_or_derived_from_packed_steps_else_the_job_is_skipped(bench):
    ja = bench("job_accuracy")
    row = {"train_tokens": "", "packing": "yes", "steps": "10", "micro_batch": "2", "grad_accum": "4",
           "gpus_per_node": "2", "nodes": "1", "seq_len": "1024"}
    assert ja.train_tokens(row) == 10 * 2 * 4 * 2 * 1024
    assert ja.train_tokens({**row, "train_tokens": "123"}) == 123
    with pytest.raises(ValueError, match="not stated"):
        ja.train_tokens({**row, "packing": "no"})


def test_a_job_is_not_predicted_by_its_own_sources_rows(bench, monkeypatch):
    ja, ta = bench("job_accuracy"), bench("throughput_accuracy")
    jobs = [r for r in csv.DictReader(ja.JOBS.open()) if r["source"] == "peft-method-comparison"][:2]
    through = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note"]
    seen = []
    fit = ta.fit
    monkeypatch.setattr(ta, "fit", lambda rs, base, grid=ta.GRID: seen.append({r["source"] for r in rs}) or fit(rs, base, grid))
    results, skipped = ja.evaluate(jobs, through, TINY)
    assert results and not skipped
    assert seen and all("peft-method-comparison" not in s for s in seen)
    for r in results:  # the wall time is training plus the start-up terms, each shown
        assert r["loso"] == pytest.approx(r["train_s"] + sum(r["startup_s"].values()), abs=0.2)
        assert set(r["startup_s"]) == {"load", "tokenize"} and r["interval_basis"]
