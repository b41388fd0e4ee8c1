"""The demo's CPU prediction: LoRA count, the step-time model on a measured CPU, and the comparison line."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest

from cheaptune.demo.predict import (
    CpuBoard,
    comparison_line,
    lora_params,
    measure_cpu,
    mlp_shape,
    predict,
)

CFG = SimpleNamespace(method="lora", sequence_len=256, micro_batch_size=4, gradient_checkpointing=False,
                      lora_r=16, gradient_accumulation_steps=1, max_steps=12)


def test_lora_count_matches_peft_on_all_linear(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: no weights to read or initialise
        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_model_dir))
    model = get_peft_model(base, LoraConfig(r=8, target_modules="all-linear"))
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert lora_params(config, 8) == model.get_nb_trainable_parameters()[0]


def test_prediction_follows_the_measured_rate(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    slow = predict(config, CFG, CpuBoard(fp32_tflops=0.05, mem_bw_gbs=10))
    fast = predict(config, CFG, CpuBoard(fp32_tflops=0.10, mem_bw_gbs=10))
    assert 1.0 < fast.tokens_per_s / slow.tokens_per_s <= 2.0  # compute halves; the fixed per-layer cost does not
    assert slow.tokens == fast.tokens == CFG.max_steps * CFG.micro_batch_size * CFG.sequence_len
    assert slow.seconds == pytest.approx(slow.tokens / slow.tokens_per_s)
    assert fast.seconds == pytest.approx(fast.tokens / fast.tokens_per_s)


def test_measure_cpu_is_quick_and_positive():
    t0 = time.perf_counter()
    board = measure_cpu(64, 32, 48, budget_s=0.1)
    assert time.perf_counter() - t0 < 1.0
    assert board.fp32_tflops > 0 and board.mem_bw_gbs > 0 and not board.bf16 and board.shape == (64, 32, 48)


def test_measured_shape_is_the_jobs_mlp(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert mlp_shape(config, CFG) == (4 * 256, config["hidden_size"], config["intermediate_size"])


def test_measured_rate_is_not_discounted_again(tiny_model_dir):
    """With no fixed or optimizer cost, compute time is FLOPs over the measured rate: the GPU curve is undone."""
    from cheaptune.catalog.models import count_params
    from cheaptune.estimate.time.throughput import ModelShape, flops_per_token

    config = json.loads((tiny_model_dir / "config.json").read_text())
    board = CpuBoard(fp32_tflops=0.05, mem_bw_gbs=1e9)  # bandwidth so high the optimizer step is ~0 s
    tps = predict(config, CFG, board).tokens_per_s
    f = flops_per_token(ModelShape.from_config(config, count_params(config)), "lora", CFG.sequence_len, False,
                        lora_params(config, CFG.lora_r))
    compute_only = board.fp32_tflops * 1e12 / f.total
    assert 0.3 * compute_only < tps < compute_only  # below it only by the fixed per-layer cost and sdpa


def test_comparison_line_says_both_and_the_ratio():
    plan = SimpleNamespace(tokens_per_s=1000.0, hours=10.0 / 3600, tokens=10000)
    line = comparison_line(plan, {"tokens_per_s": 800.0, "steps": 3}, 9.0, 7200)
    assert line.startswith("predicted vs measured: ")
    assert re.search(r"tokens/s 1000 vs 800 \(0\.80x, the probe's 3 steps\)", line)
    assert re.search(r"seconds 10\.0 vs 9\.0 \(0\.90x", line)
    assert line.endswith("tokens 10000 vs 7200")
