"""A plan times a LoRA at the config's own target modules, as `estimate --gpu` does, not at all-linear."""

from __future__ import annotations

import json

import pytest

from cheaptune.estimate.time.throughput import ModelShape
from cheaptune.plan.candidates import FitOutcome, GpuFit
from cheaptune.plan.workload import Workload

OWN = """base_model: {model}
method: lora
lora_r: 8
lora_alpha: 16
lora_targets: {targets}
sequence_len: 64
micro_batch_size: 2
gradient_accumulation_steps: 2
num_epochs: 1
"""


def test_a_qv_lora_plan_is_faster_than_all_linear_and_equal_to_estimate_gpu(run_cli, tiny_model_dir, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))
    planned, estimated = {}, {}
    for targets in ("qv", "all-linear"):
        config = tmp_path / f"{targets}.yaml"
        config.write_text(OWN.format(model=tiny_model_dir, targets=targets))
        code, out, err = run_cli("plan", "--config", str(config), "--tokens", "100000", "--gpu", "A100-80GB",
                                 "--spot", "never", "--no-speedups", "--json")
        assert code == 0, err
        best = json.loads(out)["recommended"]
        assert (best["micro_batch"], best["grad_accum"]) == (2, 2) and not best["details"].get("mfu_ceiling")
        planned[targets] = best["tokens_per_s"]
        code, out, err = run_cli("estimate", "--config", str(config), "--gpu", "A100-80GB", "--grad-accum", "2",
                                 "--json")
        assert code == 0, err
        estimated[targets] = json.loads(out)["time"]["tokens_per_s"]
    assert planned["qv"] > planned["all-linear"] * 1.05  # 2 wrapped linears per block launch fewer kernels than 7
    assert planned == pytest.approx(estimated, abs=0.05)  # the plan JSON rounds to 0.1 token/s


def test_the_workloads_targets_set_the_per_module_fixed_cost_of_the_step():
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.estimate.cost.cost import constants
    from cheaptune.plan.pricing import price_option
    from tests.plan.fakes import offer

    shape = ModelShape(params=1_100_000_000, hidden=2048, layers=22, vocab=32000, tied_embeddings=False)
    gpu = resolve_gpu("A10G")
    fit = FitOutcome(True, 1, False, gpu.memory_bytes // 2, 6_000_000, shape.params, "fake")

    def rate(targets: str | None) -> float:
        w = Workload(tokens=1_000_000, seq_len=512, effective_batch=4, lora_targets=targets)
        return price_option(GpuFit("lora", gpu, fit), offer("x", gpu.name, 1.0), w, shape, constants(), False).tokens_per_s

    assert rate("q,v") == pytest.approx(rate("qv")) and rate("q,v") > rate("attention") > rate(None)
    assert rate(None) == pytest.approx(rate("all-linear"))
