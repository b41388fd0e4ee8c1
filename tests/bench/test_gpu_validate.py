"""bench/gpu_validate.py: the CPU smoke runs the trainer's code path; recalibration fits the constants."""

from __future__ import annotations

import importlib.util
import json

import pytest


def test_default_cases_grid_then_diagonal(bench):
    gv = bench("gpu_validate")
    cases = gv.default_cases(list(gv.MODELS), with_qlora=False)
    first = [c for c in cases if c.model == gv.MODELS[0]]
    assert len(first) == 16 and {c.method for c in first} == {"lora", "full"}
    assert all(len([c for c in cases if c.model == m]) == 4 for m in gv.MODELS[1:])
    with_q = gv.default_cases(list(gv.MODELS), with_qlora=True)
    assert [c for c in with_q if c.method == "qlora"] and all(c.grad_ckpt for c in with_q if c.method == "qlora")
    # cases of one model are contiguous, so each base model is built once
    seen = [c.model for c in cases]
    assert seen == sorted(seen, key=list(gv.MODELS).index)


def test_cpu_smoke_trains_and_predicts(bench, tmp_path):
    gv = bench("gpu_validate")
    out = tmp_path / "gv.json"
    doc = gv.main(["--cpu-smoke", "--steps", "3", "--out", str(out)])
    assert json.loads(out.read_text())["mode"] == "cpu-smoke"
    ran = [r for r in doc["cases"] if "measured" in r]
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    assert len(ran) == 2 + bnb and all(r["status"] == "ok" for r in ran), doc["cases"]
    for r in ran:
        m, p = r["measured"], r["predicted"]
        assert m["steps"] == 3 and m["tokens_per_s"] > 0 and m["mfu"] > 0
        # the estimator and the trainer adapt the same modules
        assert p["trainable_params"] == m["trainable_params"]
        assert p["peak_allocated_bytes"] > 0 and p["throughput"]["tokens_per_s"] > 0
    lora = next(r for r in ran if r["method"] == "lora")
    full = next(r for r in ran if r["method"] == "full")
    assert full["measured"]["trainable_params"] > 5 * lora["measured"]["trainable_params"]
    skipped = [r for r in doc["cases"] if "measured" not in r]
    liger = [r for r in skipped if "+liger" in r["case"]]
    assert len(liger) == 1 and "liger_kernel: true needs a CUDA GPU" in liger[0]["reason"]  # refused on CPU
    qlora = [r for r in skipped if r not in liger]
    assert all(r["status"] == "skipped" and "qlora" in r["case"] for r in qlora)
    assert bool(qlora) != bnb  # QLoRA runs where bitsandbytes is, and is recorded as skipped elsewhere
    assert doc["options_vs_plain_trl"] == []  # no option ran on CPU, so nothing to compare


def test_option_cases_compare_each_option_with_plain_trl(bench):
    gv = bench("gpu_validate")
    cases = gv.option_cases(with_qlora=True)
    for method in ("lora", "qlora"):
        sets = [c.options for c in cases if c.method == method]
        assert sets[0] == () and set(gv.OPTIONS) <= {o for s in sets for o in s} and tuple(gv.OPTIONS) in sets
    assert not [c for c in gv.option_cases(with_qlora=False) if c.method == "qlora"]
    gib = 1 << 30
    rows = [{"method": "lora", "options": list(opts), "status": "ok",
             "measured": {"tokens_per_s": tps, "max_allocated_bytes": mem * gib}}
            for opts, tps, mem in (((), 1000.0, 20), (("liger",), 1200.0, 15), (("compile",), 1300.0, 22))]
    rows.append({"method": "qlora", "options": ["liger"], "status": "ok",  # no plain QLoRA row: no ratio
                 "measured": {"tokens_per_s": 1.0, "max_allocated_bytes": gib}})
    summary = gv.option_summary(rows)
    assert summary == [
        {"method": "lora", "options": ["liger"], "tokens_per_s_ratio": 1.2, "peak_allocated_ratio": 0.75},
        {"method": "lora", "options": ["compile"], "tokens_per_s_ratio": 1.3, "peak_allocated_ratio": 1.1}]
    from cheaptune.catalog.gpus import resolve_gpu

    on_h200 = gv.option_summary(rows, resolve_gpu("H200"))  # the entry a plan needs to price compile for LoRA
    assert on_h200[1]["speedups_yaml"] == {
        "option": "torch_compile", "method_class": "adapter", "vendor": "nvidia", "arch": "hopper", "factor": 1.3,
        "conditions": "bench/gpu_validate.py, cheaptune train (HF Trainer/trl), lora on H200"}


def _row(method: str, alloc: int, reserved: int, smi_mib: int, mfu: float) -> dict:
    return {"case": f"x/{method}", "method": method, "status": "ok",
            "measured": {"max_allocated_bytes": alloc, "max_reserved_bytes": reserved,
                         "nvidia_smi_used_mib": smi_mib, "mfu": mfu, "tokens_per_s": 1000.0},
            "predicted": {"peak_allocated_bytes": int(alloc * 1.1), "peak_reserved_bytes": reserved,
                          "device_total_bytes": smi_mib << 20, "throughput": {"tokens_per_s": 900.0}}}


def test_recalibrate_fits_context_slack_and_mfu(bench):
    rc = bench("gpu_recalibrate")
    gib = 1 << 30
    doc = {"date": "2026-12-01", "gpu": "H200", "cases": [
        _row("lora", 10 * gib, 11 * gib, 11 * 1024 + 500, 0.30),
        _row("lora", 20 * gib, 21 * gib, 21 * 1024 + 520, 0.40),
        _row("full", 50 * gib, 55 * gib, 55 * 1024 + 510, 0.45),
        {"case": "skipped", "status": "skipped", "reason": "deadline"},
    ]}
    fit = rc.fit(doc)
    assert fit["cases_ok"] == 3
    assert fit["overheads"]["cuda_context_bytes"] == 520 << 20
    assert fit["overheads"]["cuda_context_median_bytes"] == 510 << 20
    assert fit["overheads"]["allocator_slack_median"] == pytest.approx(0.1)
    assert fit["mfu"]["H200"]["adapter"]["mfu"] == pytest.approx(0.35)
    assert fit["mfu"]["H200"]["full"]["n"] == 1
    assert fit["worst_underprediction"]["allocated"] == pytest.approx(0.1, rel=1e-3)
    assert fit["relative_errors"][0]["tokens_per_s"] == pytest.approx(-0.1)
