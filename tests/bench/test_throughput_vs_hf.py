"""bench/throughput_vs_hf.py: the quick mode runs all three sides on the same tokens and steps."""

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


def test_packed_length_gives_one_sequence_per_baseline_micro_step(bench):
    tv = bench("throughput_vs_hf")
    lengths = tv.length_draws(48, seed=0, max_len=1000)
    n = tv.matching_seq_len(lengths, 12)
    assert n >= max(lengths)
    assert tv.packed_count(lengths, n) == 12 and tv.packed_count(lengths, n - 1) > 12
    with pytest.raises(SystemExit, match="raise --micro-batch"):
        tv.matching_seq_len(lengths, 40)  # 40 sequences cannot each hold a 1000-token row's worth


def test_quick_mode_compares_same_tokens_and_steps(bench, tmp_path):
    tv = bench("throughput_vs_hf")
    out = tmp_path / "r.json"
    doc = tv.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == doc
    m = doc["models"][0]
    rnd = m["runs"][0]
    assert set(rnd) == {"cheaptune", "trl_default", "hf_grouped"}
    for side in rnd.values():  # every side trained every real token once, in the same optimizer steps
        assert side["real_tokens"] == m["dataset"]["real_tokens"]
        assert side["steps"] == m["dataset"]["optimizer_steps"]
        assert side["cpu_seconds"] > 0 and 0 < side["train_seconds"] < side["wall_seconds"]
    for base in ("trl_default", "hf_grouped"):  # ratio: CPU time (load-robust); ratio_wall: wall time
        assert m["ratio"][base] == pytest.approx(rnd["cheaptune"]["tokens_per_cpu_s"] / rnd[base]["tokens_per_cpu_s"],
                                                 rel=1e-2)
        assert m["ratio_wall"][base] == pytest.approx(rnd["cheaptune"]["tokens_per_s"] / rnd[base]["tokens_per_s"],
                                                      rel=1e-2)
    assert doc["machine"]["cpu_count"] >= 1 and len(doc["machine"]["load_average_start"]) == 3
    assert doc["machine"]["versions"]["trl"] and doc["settings"]["mode"] == "quick"


def test_rows_longer_than_seq_len_are_refused(bench):
    tv = bench("throughput_vs_hf")
    with pytest.raises(SystemExit) as exc:
        tv.parse(["--seq-len", "256", "--max-len", "1000"])
    assert exc.value.code == 2
