"""bench/throughput_vs_hf.py: the quick mode runs both sides on the same data and counts real tokens."""

from __future__ import annotations

import json
import statistics

import pytest


def test_lengths_are_long_tailed_and_bounded(bench):
    tv = bench("throughput_vs_hf")
    xs = tv.length_draws(400, seed=0, max_len=1000)
    assert min(xs) >= 20 and max(xs) <= 1000
    assert statistics.fmean(xs) > statistics.median(xs)  # right tail
    assert max(xs) > 4 * statistics.median(xs)
    assert xs == tv.length_draws(400, seed=0, max_len=1000)  # seeded


def test_quick_mode_compares_same_real_tokens(bench, tmp_path):
    tv = bench("throughput_vs_hf")
    out = tmp_path / "r.json"
    doc = tv.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == doc
    m = doc["models"][0]
    pair = m["pairs"][0]
    ct, hf = pair["cheaptune"], pair["hf_baseline"]
    # Both trained one epoch over the same rows: real tokens agree up to the EOS trl appends per row.
    assert hf["real_tokens"] == m["dataset"]["real_tokens"]
    assert 0 <= ct["real_tokens"] - hf["real_tokens"] <= m["dataset"]["rows"]
    assert ct["steps"] < hf["steps"]  # packing: fewer, fuller steps
    assert m["dataset"]["padding_fraction_baseline"] > 0.3
    assert pair["ratio"] == pytest.approx(ct["tokens_per_s"] / hf["tokens_per_s"], rel=1e-2)
    assert doc["machine"]["cpu_count"] >= 1 and doc["settings"]["mode"] == "quick"


def test_rows_longer_than_seq_len_are_refused(bench):
    tv = bench("throughput_vs_hf")
    with pytest.raises(SystemExit) as exc:
        tv.parse(["--seq-len", "256", "--max-len", "1000"])
    assert exc.value.code == 2
