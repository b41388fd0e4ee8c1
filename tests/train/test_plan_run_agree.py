"""What the plan sized is what runs: the settings a built trainer really runs (read back from its model,
optimizer, TrainingArguments and launch config, not from the config) estimate byte-equal to the plan,
for every method, on a board with and without bf16, on one GPU and on several."""

from __future__ import annotations

import json

import pytest
import torch

from cheaptune.estimate.memory.memory import estimate_memory
from cheaptune.estimate.policy import METHODS
from cheaptune.estimate.settings import for_gpu
from cheaptune.plan import planfile
from cheaptune.train.config import build
from cheaptune.train.methods import Precision, build_model, resolve_precision
from cheaptune.train.settings import read_back
from tests.helpers import differences

SEQ, MICRO = 64, 2


def _plan_file(path, model_dir, settings) -> None:
    est = estimate_memory(settings.request(str(model_dir)))
    plan = planfile.PlanFile(
        created="2026-11-30T00:00:00Z", cheaptune_version="0", model=str(model_dir), train=settings,
        offer=planfile.Offer(provider="x", gpu="T4", gpu_count=settings.gpus, price_per_hour=1.0),
        prediction=planfile.Prediction(peak_vram_bytes=est.device_total_bytes, gpu_memory_bytes=16 << 30,
                                       tokens=1000, tokens_per_s=100.0, hours=1.0,
                                       cost=planfile.CostBreakdown(compute=1.0, total=1.0)))
    planfile.save(plan, path)


def _built_trainer(model_dir, cfg):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from cheaptune.train.trainer import build_trainer

    # the precision the plan names, on this CPU (the device check is tested below with a simulated GPU)
    prec = Precision("cpu", cfg.precision)
    model = build_model(cfg, prec)
    tok = AutoTokenizer.from_pretrained(model_dir)
    ds = Dataset.from_list([{"text": "hello world " * 10}] * 4)
    trainer = build_trainer(cfg, prec, model, tok, ds, None, "text", [])
    trainer.create_optimizer()
    return trainer


@pytest.mark.parametrize("gpus", [1, 2])
@pytest.mark.parametrize("bf16", [True, False], ids=["bf16-gpu", "no-bf16-gpu"])
@pytest.mark.parametrize("method", METHODS)
def test_trainer_runs_what_the_plan_estimated(tiny_model_dir, tmp_path, monkeypatch, method, bf16, gpus):
    sharding = None if gpus == 1 else ("fsdp" if method == "full" else "ddp")
    settings = for_gpu(method, bf16, micro_batch=MICRO, grad_accum=3, grad_ckpt=method == "full", seq_len=SEQ,
                       gpus=gpus, sharding=sharding, lora_r=8, lora_alpha=16)
    plan = tmp_path / "plan.yaml"
    _plan_file(plan, tiny_model_dir, settings)
    out = tmp_path / "out"
    cfg = build(None, plan, {"device": "cpu", "output_dir": str(out), "datasets": [{"path": "unused"}]})
    if gpus > 1:  # what `train` does with a several-GPU plan: write the accelerate config it launches with
        from cheaptune.cli.train import _gpus_and_sharding
        from cheaptune.train.distributed import launch_argv

        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        n, shard = _gpus_and_sharding(plan, None, None)
        launch_argv(["--plan", str(plan)], n, shard, out, "cuda")
    ran = read_back(_built_trainer(tiny_model_dir, cfg))
    planned = planfile.load(plan)
    assert ran.method == method and ran.precision == settings.precision and ran.quant == settings.quant
    assert (ran.micro_batch, ran.grad_accum, ran.gpus, ran.sharding) == (MICRO, 3, gpus, sharding)
    run_est = estimate_memory(ran.request(str(tiny_model_dir)))
    assert run_est.device_total_bytes == planned.prediction.peak_vram_bytes
    plan_est = estimate_memory(planned.train.request(planned.model))
    assert run_est.peak_allocated_bytes == plan_est.peak_allocated_bytes
    assert run_est.breakdown == plan_est.breakdown


@pytest.mark.parametrize("objective, precompute", [("dpo", False), ("dpo", True), ("orpo", False)])
def test_a_preference_plan_runs_as_planned(tiny_model_dir, tmp_path, objective, precompute):
    """`train --plan` with a DPO/ORPO plan builds trl's trainer for it, and what it runs estimates as planned."""
    from transformers import AutoTokenizer

    from cheaptune.train.preference import build_preference_trainer
    from cheaptune.train.run import load_data
    from tests.train.test_preference import pair_rows

    settings = for_gpu("lora", True, micro_batch=MICRO, seq_len=SEQ, lora_r=8, lora_alpha=16, objective=objective,
                       precompute_ref=precompute)
    plan, data = tmp_path / "plan.yaml", tmp_path / "pairs.jsonl"
    _plan_file(plan, tiny_model_dir, settings)
    data.write_text("\n".join(json.dumps(r) for r in pair_rows(4)) + "\n")
    cfg = build(None, plan, {"device": "cpu", "output_dir": str(tmp_path / "o"), "datasets": [{"path": str(data)}]})
    assert (cfg.objective, cfg.precompute_ref_log_probs) == (objective, precompute)
    prec = Precision("cpu", cfg.precision)
    ds, _, fmt = load_data(cfg)
    trainer = build_preference_trainer(cfg, prec, build_model(cfg, prec), AutoTokenizer.from_pretrained(
        tiny_model_dir), ds, None, fmt, [])
    ran = read_back(trainer)
    assert set(differences(ran, planfile.load(plan).train)) <= {"lora_targets"}  # all-linear, spelled out
    assert (ran.objective, ran.precompute_ref) == (objective, precompute)
    assert estimate_memory(ran.request(str(tiny_model_dir))).device_total_bytes == \
        planfile.load(plan).prediction.peak_vram_bytes


def test_a_full_fine_tune_plan_trains_at_the_precision_it_was_sized_at(tiny_model_dir, tmp_path):
    """The old plan file said bf16-mixed for a plan sized at bf16-true: fp32 master weights doubled the
    run's weights. The read-back weights are 2 bytes each, as sized."""
    settings = for_gpu("full", True, micro_batch=MICRO, seq_len=SEQ)
    plan = tmp_path / "plan.yaml"
    _plan_file(plan, tiny_model_dir, settings)
    cfg = build(None, plan, {"device": "cpu", "output_dir": str(tmp_path / "o"), "datasets": [{"path": "x"}]})
    trainer = _built_trainer(tiny_model_dir, cfg)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}
    assert not trainer.args.bf16 and not trainer.args.fp16


@pytest.mark.parametrize("bf16_ok, method, expected", [
    (True, "full", "bf16-true"), (True, "lora", "bf16-mixed"), (True, "qlora", "bf16-true"),
    (False, "full", "fp16-mixed"), (False, "lora", "fp16-mixed"), (False, "qlora", "fp16-mixed"),
])
def test_on_a_gpu_the_trainer_picks_the_precision_the_planner_fits(tiny_model_dir, tmp_path, monkeypatch,
                                                                  bf16_ok, method, expected):
    from cheaptune.plan.candidates import run_precision
    from tests.plan.fakes import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_ok)
    cfg = build(None, None, {"base_model": str(tiny_model_dir), "method": method, "output_dir": str(tmp_path)})
    assert resolve_precision(cfg).name == expected == run_precision(method, gpu("X", 16, bf16=bf16_ok))


def test_a_config_that_changes_a_plan_setting_is_warned_and_refused_when_it_no_longer_fits(tiny_model_dir,
                                                                                          tmp_path, capsys):
    from cheaptune.errors import BadInput
    from cheaptune.train.plancheck import check_plan_overrides

    settings = for_gpu("lora", True, micro_batch=1, seq_len=SEQ)
    plan = tmp_path / "plan.yaml"
    _plan_file(plan, tiny_model_dir, settings)
    raw = planfile.load(plan).model_dump(mode="json")
    raw["prediction"]["gpu_memory_bytes"] = raw["prediction"]["peak_vram_bytes"] + 1  # a GPU it just fits
    plan.write_text(json.dumps(raw))
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text("micro_batch_size: 8\n")
    cfg = build(cfg_file, plan, {"output_dir": str(tmp_path / "o")})
    assert cfg.micro_batch_size == 8
    with pytest.raises(BadInput, match="--force") as err:
        check_plan_overrides(cfg, plan)
    assert "\n" not in str(err.value)
    peak = check_plan_overrides(cfg, plan, force=True)
    assert peak > raw["prediction"]["peak_vram_bytes"]
    warned = capsys.readouterr().err
    assert f"micro_batch_size 1 -> 8 (config file {cfg_file})" in warned and "estimated peak" in warned
    assert "the config replaces" not in warned  # said of a flag too, where no config file was given
    same = build(None, plan, {"output_dir": str(tmp_path / "o"), "num_epochs": 3})  # epochs: no new peak
    assert check_plan_overrides(same, plan) is None
    assert f"num_epochs {settings.epochs} -> 3 (command line)" in capsys.readouterr().err


def test_a_plan_that_trains_the_embedding_and_head_runs_them_as_planned(tiny_model_dir, tmp_path):
    """train_modules (peft modules_to_save) goes plan -> config (lora_modules_to_save) -> the built trainer's peft
    config, and what runs estimates as planned: a trained copy of the embedding and of the head beside the adapter."""
    settings = for_gpu("lora", True, micro_batch=MICRO, seq_len=SEQ, lora_r=8, lora_alpha=16,
                       train_modules="embed_tokens,lm_head")
    plan = tmp_path / "plan.yaml"
    _plan_file(plan, tiny_model_dir, settings)
    cfg = build(None, plan, {"device": "cpu", "output_dir": str(tmp_path / "out"), "datasets": [{"path": "unused"}]})
    assert cfg.lora_modules_to_save == ["embed_tokens", "lm_head"]
    trainer = _built_trainer(tiny_model_dir, cfg)
    ran = read_back(trainer)
    assert ran.train_modules == "embed_tokens,lm_head"
    trained = {n for n, p in trainer.model.named_parameters() if p.requires_grad and "modules_to_save" in n}
    assert any("embed_tokens" in n for n in trained) and any("lm_head" in n for n in trained)
    run_est = estimate_memory(ran.request(str(tiny_model_dir)))
    assert run_est.device_total_bytes == planfile.load(plan).prediction.peak_vram_bytes
    plain = estimate_memory(for_gpu("lora", True, micro_batch=MICRO, seq_len=SEQ, lora_r=8,
                                    lora_alpha=16).request(str(tiny_model_dir)))
    assert run_est.trainable_params > plain.trainable_params
