"""The demo's own prediction: the step-time model priced on this machine's CPU, then held against the run.

The catalog has no CPU board, so the CPU's rate comes from what it does here: a fp32 matmul of the job's
own MLP shape (micro-step tokens x hidden @ hidden x intermediate) and a tensor copy, timed at start-up
(well under a second). That rate already is what this shape sustains, so the board's sustained fraction
is set to undo the step-time model's GPU efficiency curve at that shape instead of applying it twice.
Everything else (FLOPs per token, fixed cost per layer, optimizer step) is estimate.throughput unchanged,
so the demo shows how far the model is off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

CPU_NAME = "CPU (measured here)"
COPY_BYTES = 64 * 2**20  # larger than any last-level cache, so the copy measures memory bandwidth


@dataclass(frozen=True)
class CpuBoard:
    """The fields estimate.throughput reads from a GPU entry, filled from measurements on this CPU."""

    fp32_tflops: float
    mem_bw_gbs: float
    shape: tuple[int, int, int] = (0, 0, 0)  # the matmul measured: (m, k, n)
    name: str = CPU_NAME
    bf16: bool = False
    bf16_tflops: float = 0.0
    fp16_tflops: float = 0.0


def _timed(fn: Any, budget_s: float) -> tuple[int, float]:
    """Repeat `fn` (after one warm-up call) until `budget_s` passes: (calls, seconds)."""
    fn()
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < budget_s:
        fn()
        n += 1
    return n, elapsed


def measure_cpu(m: int, k: int, n: int, budget_s: float = 0.3) -> CpuBoard:
    """fp32 FLOP/s of an (m x k) @ (k x n) matmul and copy bandwidth, with torch's threads, as training uses them."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    calls, s = _timed(lambda: a @ b, budget_s)
    flops = 2 * m * k * n * calls / s
    src = torch.empty(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    calls, s = _timed(lambda: dst.copy_(src), budget_s / 2)
    return CpuBoard(fp32_tflops=flops / 1e12, mem_bw_gbs=2 * COPY_BYTES * calls / s / 1e9, shape=(m, k, n))


def mlp_shape(config: dict[str, Any], cfg: Any) -> tuple[int, int, int]:
    """(tokens per micro-step, hidden, intermediate): the up-projection, the job's largest matmul per layer."""
    return cfg.micro_batch_size * cfg.sequence_len, config["hidden_size"], config["intermediate_size"]


def lora_params(config: dict[str, Any], r: int) -> int:
    """Trainable LoRA parameters on every linear layer of a Llama-style block (what all-linear targets)."""
    h, heads = config["hidden_size"], config["num_attention_heads"]
    hd = config.get("head_dim") or h // heads
    kv = (config.get("num_key_value_heads") or heads) * hd
    inter = config["intermediate_size"]
    per_layer = (h + heads * hd) * 2 + (h + kv) * 2 + (h + inter) * 3  # q o, k v, gate up down
    return r * per_layer * config["num_hidden_layers"]


@dataclass(frozen=True)
class Prediction:
    tokens_per_s: float
    seconds: float  # for the run's max_steps
    tokens: int  # what those steps train at full packed rows


def predict(config: dict[str, Any], cfg: Any, board: CpuBoard) -> Prediction:
    """Speed and time of the LoRA run `cfg` (a TrainConfig) on `board`, in fp32 (what train uses on CPU)."""
    from cheaptune.catalog.models import count_params
    from cheaptune.estimate.time.throughput import Job, ModelShape, load_table, matmul_efficiency, step_time

    table = dict(load_table())
    sf = table["sustained_fraction"]
    tokens, hidden, _ = mlp_shape(config, cfg)
    undo = 1.0 / matmul_efficiency(tokens, hidden, table)  # the measured rate is this shape's already
    table["sustained_fraction"] = {**sf, "boards": {**sf["boards"], board.name: undo}}
    sb = table["sustained_bandwidth"]  # the board's copy rate is measured here already: no fraction on top
    table["sustained_bandwidth"] = {**sb, "boards": {**sb["boards"], board.name: {"value": 1.0, "label": "measured"}}}
    job = Job(ModelShape.from_config(config, count_params(config)), cfg.method, cfg.sequence_len,
              cfg.micro_batch_size, cfg.gradient_checkpointing, lora_params(config, cfg.lora_r),
              cfg.gradient_accumulation_steps, precision="fp32")
    st = step_time(job, board, table=table)
    steps = cfg.max_steps
    return Prediction(st.tokens_per_s, st.step_seconds * steps, tokens * cfg.gradient_accumulation_steps * steps)


def board_line(board: CpuBoard) -> str:
    m, k, n = board.shape
    return (f"CPU rate measured here (the catalog has no CPU entry): {board.fp32_tflops * 1000:.0f} GFLOP/s on "
            f"this job's fp32 MLP matmul ({m}x{k} @ {k}x{n}), {board.mem_bw_gbs:.1f} GB/s copy")


def prediction_line(p: Prediction, steps: int) -> str:
    return (f"predicted on this CPU (step-time model): {p.tokens_per_s:.0f} tokens/s, {p.seconds:.1f} s for "
            f"{steps} steps ({p.tokens} tokens at full packed rows)")


def comparison_line(plan: Any, probe: dict[str, Any], meas_s: float, meas_tokens: int) -> str:
    """'predicted vs measured: tokens/s X vs Y (ratio), seconds X vs Y (ratio); tokens X vs Y'; ratio = measured
    / predicted. `plan`: a plan file's prediction; `probe`: train's probe measurement (its pace after the first
    step); `meas_s`: the training loop's seconds, checkpoint saves included. The tokens say why the seconds'
    ratio can differ from the speed's: packed rows are not always full."""
    tps, seconds = probe["tokens_per_s"], plan.hours * 3600
    return (f"predicted vs measured: tokens/s {plan.tokens_per_s:.0f} vs {tps:.0f} ({tps / plan.tokens_per_s:.2f}x, "
            f"the probe's {probe['steps']} steps), seconds {seconds:.1f} vs {meas_s:.1f} ({meas_s / seconds:.2f}x, "
            f"the training loop); tokens {plan.tokens} vs {meas_tokens}")
