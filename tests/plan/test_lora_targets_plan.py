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
micro_batch_size: 1
gradient_accumulation_steps: 1
num_epochs: 1
"""


def test_a_qv_lora_plan_is_faster_than_all_linear_and_equal_to_estimate_gpu(run_cli, tiny_model_dir, tmp_path,
                                                                           monkeypatch):
    """plan --config times the config's own targets, as `estimate --config --gpu` does; --lora-targets wins."""
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))

    def planned(targets: str, *flags: str) -> float:
        config = tmp_path / f"{targets}.yaml"
        config.write_text(OWN.format(model=tiny_model_dir, targets=targets))
        code, out, err = run_cli("plan", "--config", str(config), "--tokens", "100000", "--gpu", "A100-80GB",
                                 "--spot", "never", "--no-speedups", "--json", *flags)
        assert code == 0, err
        best = json.loads(out)["recommended"]
        assert (best["micro_batch"], best["grad_accum"]) == (1, 1) and not best["details"].get("mfu_ceiling")
        return best["tokens_per_s"]

    qv, linear = planned("qv"), planned("all-linear")
    assert qv > linear * 1.05  # 2 wrapped linears per block launch fewer kernels than 7
    assert planned("qv", "--lora-targets", "all-linear") == linear  # the flag wins over the config's key
    code, out, err = run_cli("estimate", "--config", str(tmp_path / "qv.yaml"), "--gpu", "A100-80GB", "--json")
    assert code == 0, err
    assert qv == pytest.approx(json.loads(out)["time"]["tokens_per_s"], abs=0.05)  # the plan JSON rounds to 0.1


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


def test_plan_lora_targets_sizes_times_and_saves_them_as_estimate_does(run_cli, tiny_model_dir, tmp_path, monkeypatch):
    """`plan --lora-targets qv` (no config): the fit simulates q,v, the step is timed at 2 wrapped linears per block,
    the plan file stores qv, and `estimate --gpu` with the saved settings gives the same peak and tokens/s."""
    from cheaptune.estimate.memory.memory import estimate_memory
    from cheaptune.plan import planfile

    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))
    rates = {}
    for targets in ("qv", "all-linear"):
        out = tmp_path / f"{targets}.yaml"
        code, doc, err = run_cli("plan", str(tiny_model_dir), "--tokens", "100000", "--seq-len", "64", "--method", "lora",
                                 "--effective-batch", "1",
                                 "--gpu", "A100-80GB", "--spot", "never", "--no-speedups", "--lora-targets", targets,
                                 "--save", str(out), "--json")
        assert code == 0, err
        rates[targets] = json.loads(doc)["recommended"]["tokens_per_s"]
        t = planfile.load(out).train
        assert t.lora_targets == targets
        assert estimate_memory(t.request(str(tiny_model_dir))).device_total_bytes == \
            planfile.load(out).prediction.peak_vram_bytes
        code, est, err = run_cli("estimate", "--model", str(tiny_model_dir), "--method", "lora", "--lora-targets",
                                 targets, "--micro-batch", str(t.micro_batch), "--grad-accum", str(t.grad_accum),
                                 "--seq-len", "64", "--precision", t.precision,
                                 "--grad-ckpt" if t.grad_ckpt else "--no-grad-ckpt", "--gpu", "A100-80GB", "--json")
        assert code == 0, err
        assert rates[targets] == pytest.approx(json.loads(est)["time"]["tokens_per_s"], abs=0.05)
    assert rates["qv"] > rates["all-linear"] * 1.05
    code, _, err = run_cli("plan", str(tiny_model_dir), "--objective", "grpo", "--prompts", "100", "--lora-targets", "qv")
    assert code == 2 and "--lora-targets is not planned for --objective grpo" in err
    code, _, err = run_cli("plan", str(tiny_model_dir), "--tokens", "1000", "--lora-targets", "q_proj,nope")
    assert code == 2 and "unknown LoRA target 'nope'" in err and len(err.strip().splitlines()) == 1
