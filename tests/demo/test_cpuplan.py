"""The demo's plan for the CPU it runs on: a valid plan file that `train --plan` trains from unchanged."""

from __future__ import annotations

import json
from types import SimpleNamespace

from cheaptune.demo import cpuplan
from cheaptune.demo.predict import Prediction
from cheaptune.demo.run import DEFAULTS
from cheaptune.plan import planfile
from cheaptune.train.config import build, read_yaml


def _cpu_plan(tiny_model_dir, tmp_path, monkeypatch):
    """The plan with the estimator faked (the real simulation takes seconds; test_run runs it end to end)."""
    from cheaptune.estimate.memory import memory

    asked = []
    monkeypatch.setattr(memory, "estimate_memory", lambda req: asked.append(req) or SimpleNamespace(
        peak_allocated_bytes=3 << 20))
    config = DEFAULTS["sft"][1]
    cfg = build(config, overrides={"base_model": str(tiny_model_dir), "max_steps": 4})
    prediction = Prediction(tokens_per_s=1234.5, seconds=3.3, tokens=4096)
    plan = cpuplan.cpu_plan(cfg, str(tiny_model_dir), str(DEFAULTS["sft"][0]), prediction)
    (req,) = asked
    assert (req.method, req.precision, req.seq_len, req.micro_batch) == ("lora", "fp32", 256, 4)  # what trains
    return cpuplan.write(plan, read_yaml(config), tmp_path / "run")


def test_the_cpu_plan_is_a_plan_file_train_reads_for_this_cpu(tiny_model_dir, tmp_path, monkeypatch):
    plan_path, config_path = _cpu_plan(tiny_model_dir, tmp_path, monkeypatch)
    plan = planfile.load(plan_path)  # validated as any plan file is
    assert plan.offer.gpu == "CPU" and plan.offer.price_per_hour == 0.0 and plan.prediction.cost.total == 0.0
    assert plan.prediction.tokens_per_s == 1234.5 and abs(plan.prediction.hours * 3600 - 3.3) < 1e-9
    assert plan.train.precision == "fp32" and plan.train.method == "lora" and plan.train.optimizer == "adamw"
    assert plan.prediction.peak_vram_bytes == 3 << 20 < plan.prediction.gpu_memory_bytes  # this machine's RAM
    cfg = build(config_path, plan_path, {"base_model": str(tiny_model_dir), "output_dir": str(tmp_path / "o")})
    assert cfg._plan_overrides == {}  # the run config sets nothing the plan sets: no "replaces plan" warning
    assert cfg.predicted_gpu == "CPU" and cfg.predicted_tokens_per_s == 1234.5
    assert cfg.max_steps == 12 and cfg.learning_rate == 0.001 and cfg.sample_prompts  # the config's own keys stay


def test_the_run_config_keeps_only_what_is_not_a_plan_setting():
    kept = cpuplan.run_config({"adapter": "lora", "lora_r": 8, "lora_target_linear": True, "optimizer": "adamw_torch",
                               "sequence_len": 256, "micro_batch_size": 4, "learning_rate": 0.01, "max_steps": 3})
    assert kept == {"learning_rate": 0.01, "max_steps": 3}
    assert json.dumps(kept)  # plain values, as written to YAML
