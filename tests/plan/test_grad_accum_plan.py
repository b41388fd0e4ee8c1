"""A plan that accumulates gradients sizes the gradients held from one micro-step into the next (issue 31):
its peak is the direct `estimate --grad-accum N` of the settings it saves, and train's plan check agrees,
re-estimating when a run crosses between one micro-step and several."""

from __future__ import annotations

import json

import pytest

from cheaptune.plan import planfile

SEQ, BATCH = 64, 192  # more sequences per step than the largest searched micro-batch (64): accumulation 3


@pytest.fixture
def full_plan(tiny_model_dir, tmp_path, run_cli):
    path = tmp_path / "plan.yaml"
    code, _, err = run_cli("plan", str(tiny_model_dir), "--tokens", "200000", "--gpu", "T4", "--seq-len", str(SEQ),
                           "--method", "full", "--effective-batch", str(BATCH), "--save", str(path), "--json")
    assert code == 0, err
    return planfile.load(path), path


def _direct(run_cli, model, t, accum: int) -> dict:
    code, out, err = run_cli("estimate", "--model", str(model), "--method", "full", "--precision", t.precision,
                             "--micro-batch", str(t.micro_batch), "--seq-len", str(t.seq_len),
                             "--grad-accum", str(accum), *(["--grad-ckpt"] if t.grad_ckpt else []), "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_full_fine_tune_plan_that_accumulates_sizes_the_held_gradients(full_plan, tiny_model_dir, run_cli):
    plan, _ = full_plan
    t = plan.train
    assert t.grad_accum == 3 and t.micro_batch == 64
    direct = _direct(run_cli, tiny_model_dir, t, t.grad_accum)
    assert plan.prediction.peak_vram_bytes == direct["device_total_bytes"]
    one_step = _direct(run_cli, tiny_model_dir, t, 1)
    held = direct["device_total_bytes"] - one_step["device_total_bytes"]
    # a 16-bit gradient per weight at least (fp16-mixed on a T4 holds fp32 master weights and their gradients)
    assert held >= 2 * direct["trainable_params"]


def test_plancheck_agrees_and_re_estimates_when_the_run_stops_accumulating(full_plan, tiny_model_dir, tmp_path,
                                                                          capsys):
    from cheaptune.train.config import build
    from cheaptune.train.plancheck import _new_peak, check_plan_overrides

    plan, path = full_plan
    same = build(None, path, {"output_dir": str(tmp_path / "o"), "datasets": [{"path": "unused"}]})
    assert _new_peak(same, plan)[0] == plan.prediction.peak_vram_bytes
    assert check_plan_overrides(same, path) is None  # nothing replaced: nothing to re-estimate
    more = build(None, path, {"output_dir": str(tmp_path / "o"), "gradient_accumulation_steps": 6})
    assert check_plan_overrides(more, path) is None  # 3 -> 6 micro-steps hold the same gradients
    one = build(None, path, {"output_dir": str(tmp_path / "o"), "gradient_accumulation_steps": 1})
    peak = check_plan_overrides(one, path)
    assert peak is not None and peak < plan.prediction.peak_vram_bytes  # no gradients held into a forward
    assert "estimated peak" in capsys.readouterr().err


def test_sharded_accumulation_holds_each_gpus_share_of_the_gradients_in_the_forward():
    """ZeRO-3 keeps a 1/N shard of the accumulated gradients: the per-GPU forward grows by about a quarter of the
    gradients on 4 GPUs, not by all of them as the one-GPU estimate it derives from does."""
    from cheaptune.demo.tiny import tiny_llama_config
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

    kw = dict(model=tiny_llama_config(512).to_dict(), method="full", micro_batch=2, seq_len=64)
    one, held = (estimate_memory(EstimateRequest(**kw, grad_accum=a)) for a in (1, 2))
    grads = held.trainable_params * 2  # bf16-true
    assert held.phase_peaks["forward"] - one.phase_peaks["forward"] >= grads  # one GPU: every gradient
    one, held = (estimate_memory(EstimateRequest(**kw, grad_accum=a, gpus=4, sharding="zero3")) for a in (1, 2))
    grew = held.phase_peaks["forward"] - one.phase_peaks["forward"]
    assert grads / 4 <= grew <= grads / 2
