"""bench/throughput_accuracy.py scores leave-one-source-out: no row is predicted by constants fitted on its source."""

from __future__ import annotations

import csv
import itertools
import math

import pytest

TINY = {"e_max": (0.5, 0.8), "tokens_half": (300,), "hidden_half": (600,), "full": (0.001,), "adapter": (0.001,)}


def rows(ta, sources=("torchtune-readme", "vectorlm-docs", "peft-method-comparison")):
    got = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note" and r["source"] in sources]
    return got[:4] + [r for r in got if r["source"] != got[0]["source"]][:6]


def test_no_row_is_predicted_by_constants_fitted_on_its_own_source(bench, monkeypatch):
    ta = bench("throughput_accuracy")
    seen: list[set[str]] = []
    fit = ta.fit

    def spy(rs, base, grid=ta.GRID):
        seen.append({r["source"] for r in rs})
        return fit(rs, base, grid)

    monkeypatch.setattr(ta, "fit", spy)
    rs = rows(ta)
    held = ta.loso(rs, ta.tp.load_table(), TINY)
    assert set(held) == {r["id"] for r in rs}
    for source in {r["source"] for r in rs}:  # each fold's fits leave the held-out source out
        assert any(source not in s and s for s in seen)
    # the refit really differs from the fit on every row: predictions are not the in-sample ones
    results, tables = ta.evaluate(rs, TINY)
    assert {r["stack"] for r in results} <= set(tables)
    assert all(r["loso"] > 0 and r["fitted"] > 0 and r["measured"] > 0 for r in results)


def test_summary_reports_typical_bias_and_worst_per_board_method_and_gpu_count(bench):
    ta = bench("throughput_accuracy")
    results = [{"id": "a", "gpu": "A100", "method": "lora", "gpus": 1, "stack": "hf", "measured": 100.0,
                "loso": 200.0, "fitted": 110.0, "baseline": 50.0},
               {"id": "b", "gpu": "L4", "method": "full", "gpus": 8, "stack": "hf", "measured": 100.0,
                "loso": 50.0, "fitted": 100.0, "baseline": 100.0}]
    s = ta.summary(results)
    assert s["all"]["loso"]["typical"] == pytest.approx(2.0)  # geometric mean of max(r, 1/r): x2 and x2
    assert s["all"]["loso"]["bias"] == pytest.approx(0.0)  # x2 and x0.5 cancel
    assert s["all"]["loso"]["worst"]["factor"] == pytest.approx(2.0)
    assert set(s["per_board"]) == {"A100", "L4"} and set(s["per_gpus"]) == {"1", "5+"}
    assert s["per_method"]["lora"]["fitted"]["typical"] == pytest.approx(1.1)


def test_a_row_faster_than_its_boards_matmul_rate_sets_no_ceiling(bench):
    ta = bench("throughput_accuracy")
    base = {"method": "lora", "source": "s", "url": "u", "source_date": "undated", "read": "2026-12-01"}
    got = ta.ceilings([{**base, "id": "ok", "gpu": "A100-80GB", "mfu_published": 0.4},
                       {**base, "id": "impossible", "gpu": "A100-80GB", "mfu_published": 0.95}])
    assert got["A100-80GB/adapter"]["row"] == "ok"
    assert got["A100-80GB/adapter"]["of_gemm"] == pytest.approx(0.4 / 0.869, rel=1e-3)


def test_lora_targets_count_only_the_adapted_linears(bench):
    ta = bench("throughput_accuracy")
    cfg = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2}
    assert ta.lora_params(cfg, 1, "q,v") == 2 * (16 + 16)
    assert ta.lora_params(cfg, 1, "mlp") == ta.lora_params(cfg, 1, "gate,up,down") == 2 * 3 * 24
    assert ta.lora_params(cfg, 1, "") == ta.lora_params(cfg, 1, "all-linear")
    assert math.isclose(ta.lora_params(cfg, 2, "q"), 2 * ta.lora_params(cfg, 1, "q"))


def test_coverage_widens_the_bands_by_a_factor_fitted_without_the_scored_source(bench):
    ta = bench("throughput_accuracy")
    results = [{"id": f"{s}{i}", "source": s, "gpu_arch_class": "a100", "method": "lora", "gpus": 1, "stack": "hf",
                "measured": 100.0, "loso": 100.0 * f} for s, fs in (("a", (0.8, 1.0, 1.3, 1.1, 0.9, 1.6)),
                                                                     ("b", (1.2, 0.7, 1.0, 1.05, 2.0, 0.95)),
                                                                     ("c", (1.0, 1.1, 0.85, 1.4, 0.6, 1.0)))
               for i, f in enumerate(fs)]
    cov = ta.coverage(results)
    assert cov["rows"] == 18 and cov["widen"] >= 1.0
    assert cov["inside_p10_p90"] >= cov["inside_unwidened"]  # each fold's factor is >= 1: bands only grow
    assert cov["widen"] == pytest.approx(ta.inflation(results), abs=1e-3)


def test_the_elementwise_bytes_are_one_value_shared_by_every_stack(bench):
    """Within one stack's rows (mostly one board) the memory-bound term cannot be told from the efficiency:
    it is chosen once, over every stack's own fit, and each stack carries that same value."""
    ta = bench("throughput_accuracy")
    rs = rows(ta)
    assert len({ta.row_stack(r).fit for r in rs}) >= 2
    tables = ta.fitted_tables(rs, ta.tp.load_table(), {**TINY, "elementwise_bytes": (0, 300)})
    assert len({c["elementwise_bytes"] for c in tables.values()}) == 1
    assert 0 <= next(iter(tables.values()))["elementwise_bytes"] <= 300  # within its search range


def test_rows_of_no_named_stack_are_each_their_own_sources_stack(bench):
    """'other' lumps unrelated trainers: each such source fits alone, so held out it gets the pooled fit."""
    ta = bench("throughput_accuracy")
    a = {"source": "vectorlm-docs", "stack": "other"}
    b = {"source": "some-repo", "stack": "other"}
    assert ta.row_stack(a).fit == "vectorlm" and ta.row_stack(b).fit == "some-repo"
    assert ta.row_stack({"source": "x", "stack": "trl"}).fit == "hf"  # a named stack keeps its name
    held = ta.loso(rows(ta, ("vectorlm-docs", "torchtune-readme")), ta.tp.load_table(), TINY)
    vl = [h["how"] for k, h in held.items() if k.startswith("VL")]
    assert vl and all(how.startswith("no other source of its stack") for how in vl)


def test_the_fixed_costs_and_elementwise_bytes_are_one_value_shared_by_every_stack(bench):
    """Launch-bound floors and memory-bound bytes cannot be told from the efficiency within one stack's rows:
    every stack gets the one value that scores best over all rows, not its own, searched within its range."""
    ta = bench("throughput_accuracy")
    grid = {**TINY, "full": (0.0, 0.002), "per_module": (0.0, 0.0006), "elementwise_bytes": (0, 100)}
    rs = rows(ta, ("torchtune-readme", "peft-method-comparison"))
    assert len({ta.row_stack(r).fit for r in rs}) == 2
    base = ta.tp.load_table()
    tables = ta.fitted_tables(rs, base, grid)
    shared = {(t["full"], t["per_module"], t["elementwise_bytes"]) for t in tables.values()}
    assert len(shared) == 1
    (full, per, eb), = shared
    assert 0 <= full <= 0.002 and 0 <= per <= 0.0006 and 0 <= eb <= 100
    best = ta.score_tables(rs, base, tables)
    for corner in itertools.product(grid["full"], grid["per_module"], grid["elementwise_bytes"]):
        other = ta._tables_at(rs, base, {**grid, **dict(zip(("full", "per_module", "elementwise_bytes"),
                                                            ((v,) for v in corner), strict=True))})
        assert best <= ta.score_tables(rs, base, other) + 1e-12  # no corner of the box scores better



def test_the_full_ratio_is_one_shared_value_recovered_from_rows_made_with_it(bench):
    """Rows timed by the model with full fine-tunes at 1.3x an adapter step's matmul share: the fit finds 1.3 (the
    ratio is told apart from e_max by rows of both methods on one stack) and every stack carries that one value."""
    ta = bench("throughput_accuracy")
    base = ta.tp.load_table()
    truth = {"e_max": 0.6, "tokens_half": 300, "hidden_half": 600, "full": 0.001, "adapter": 0.001, "full_ratio": 1.3}
    made = ta.with_constants(base, "fit", truth)
    rs = [{**r, "tokens_per_s": str(ta.predict(r, made, "fit")), "per_gpu": "no", "compiled": "no"}
          for r in csv.DictReader(ta.ROWS.open()) if r["id"] in ("TT2", "TT6")]
    assert {r["method"] for r in rs} == {"lora", "full"}  # both methods on one stack: the ratio is identifiable
    tables = ta.fitted_tables(rs, base, {**TINY, "full_ratio": (0.5, 2.0)})
    assert len({t["full_ratio"] for t in tables.values()}) == 1
    assert tables["pooled"]["full_ratio"] == pytest.approx(1.3, abs=0.02)
    assert tables["pooled"]["e_max"] == pytest.approx(0.6, abs=0.01)
