"""Seconds per GRPO optimizer step, by part, and the share that goes to generation.

Why its own model: a GRPO step is mostly sampling, which the SFT step-time model does not see. One step =
  generation: prefill (2 x params FLOPs per prompt token at the sustained matmul rate) and decode, one token
    step after another, each the longer of reading every weight (memory-bound at small batch) and computing
    2 x params FLOPs per sequence (compute-bound at large batch), plus the KV cache read and a fixed cost per
    layer; the bandwidth at a fitted efficiency;
  log-prob forwards: the policy's old log-probs (trl's vLLM sampling correction) and the reference's (beta > 0);
  the training step: the existing step-time model (estimate.throughput.step_time), called as is;
  weight sync: the trained weights into the generator (in-GPU when colocated, over the link to a server; trl
    merges LoRA adapters and sends every weight);
  a fixed per-step cost (rewards, gathers, logging), fitted.
How long completions run is a property of the task, not of the model or GPU (public runs with short answers stop
far below the cap, reasoning runs reach it): time is estimated with every completion at max_completion_length,
the pessimistic end, unless the setup gives the length the user expects (memory is always sized at the cap).
A 4-bit generator (Unsloth's vLLM with bitsandbytes) dequantises every weight per decode step: the step-time
model's dequant bytes per parameter over the bandwidth, instead of reading 16-bit weights.
Constants: data/grpo.yaml (fitted ones by bench/grpo_accuracy.py) and data/steptime.yaml (rates, links).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

from cheaptune.estimate.grpo_setup import GrpoSetup, constants, generator_weight_bytes, kv_bytes_per_token
from cheaptune.estimate.policy import compute_dtype
from cheaptune.estimate.time import scaling
from cheaptune.estimate.time import throughput as tp


@dataclass(frozen=True)
class GrpoTime:
    step_seconds: float
    parts: dict[str, float]  # prefill, decode, policy_logprobs, reference_logprobs, train, weight_sync, overhead
    generation_share: float  # (prefill + decode) / step
    completions_per_step: int
    engine_batch: int
    train: dict[str, Any]  # the SFT step-time model's StepTime for the training part

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parts"] = {k: round(v, 9) for k, v in self.parts.items()}  # ns, as throughput.StepTime's parts
        return d


def _precision(req: Any, gpu: Any) -> str:
    return compute_dtype(req.precision, getattr(gpu, "bf16", False))


def _rate(gpu: Any, precision: str, tokens: int, hidden: int, table: dict, stack: str) -> float:
    """FLOP/s a forward over `tokens` tokens sustains (the step-time model's matmul efficiency)."""
    return tp.sustained_rate(gpu, precision, table) * tp.matmul_efficiency(max(tokens, 1), hidden, table, stack)


def generation_seconds(setup: GrpoSetup, shape: tp.ModelShape, cfg: dict, gpu: Any, stack: str,
                       table: dict | None = None, consts: dict | None = None) -> tuple[float, float]:
    """(prefill, decode) seconds per optimizer step on one generator engine (all engines run in parallel)."""
    table = table or tp.load_table()
    c = consts or constants()
    precision = _precision(setup.request, gpu)
    batch, prompt, gen = setup.engine_batch, setup.prompt_len, setup.max_completion_length
    per_token = 2 * shape.matmul_params
    prefill = batch * prompt * per_token / _rate(gpu, precision, batch * prompt, shape.hidden, table, stack)
    bw = gpu.mem_bw_gbs * 1e9 * float(c["bandwidth_efficiency"])
    weights = generator_weight_bytes(shape.params, setup.request.method, stack)
    if weights < 2 * shape.params:  # 4-bit: dequantised to 16 bits per matmul, as the training step does
        weights = shape.matmul_params * float(table["dequant"]["bytes_per_param"]["value"])
    # the compute bound of a decode step at its saturated matmul rate: the memory bound governs small batches, so
    # the training model's small-token efficiency (kernel launches it counts) must not count twice
    e_max = float(tp.stack_constants(table, stack)["efficiency"]["e_max"]["value"])
    compute = batch * per_token / (tp.sustained_rate(gpu, precision, table) * e_max)
    kv_read = batch * (prompt + gen / 2) * kv_bytes_per_token(cfg) / bw
    token_step = max(weights / bw, compute) + kv_read + shape.layers * float(c["per_layer_token_s"])
    decode = gen * token_step
    if setup.generation_backend == "transformers":
        slow = float(c["transformers_slowdown"])
        prefill, decode = prefill * slow, decode * slow
    return setup.rounds * prefill, setup.rounds * decode


def logprob_seconds(setup: GrpoSetup, shape: tp.ModelShape, trainable: int, gpu: Any, stack: str,
                    table: dict | None = None) -> float:
    """One no-grad forward over every completion a training GPU holds this step (prompt + completion tokens)."""
    table = table or tp.load_table()
    req = setup.request
    f = tp.flops_per_token(shape, req.method, setup.seq_len, False, trainable)
    tokens = req.micro_batch * setup.seq_len
    rate = _rate(gpu, _precision(req, gpu), tokens, shape.hidden, table, stack)
    return setup.grad_accum * tokens * f.forward / rate


def sync_seconds(setup: GrpoSetup, shape: tp.ModelShape, gpu: Any, stack: str, table: dict | None = None) -> float:
    """Moving the updated weights into the generator once per step: 16-bit weights (LoRA merged first, as trl
    does) over the GPU-to-GPU link to a server, or a copy in GPU memory when colocated; Unsloth's colocated
    LoRA shares its weights with vLLM (nothing moves)."""
    table = table or tp.load_table()
    if setup.generation_backend == "transformers" or (stack == "unsloth" and setup.request.method != "full"):
        return 0.0
    nbytes = shape.params * 2.0
    if setup.server:
        return nbytes / (scaling.intra_node_gbs(gpu, table) * 1e9)
    return 2 * nbytes / tp.sustained_bandwidth(gpu, table)[0]  # read + write


def at_length(setup: GrpoSetup, tokens: int) -> GrpoSetup:
    """The setup with every completion `tokens` long (a generation call waits for its longest completion, and the
    training step pads to it)."""
    return dataclasses.replace(setup, max_completion_length=tokens, expected_completion_length=None,
                               request=dataclasses.replace(setup.request, seq_len=setup.prompt_len + tokens))


def grpo_step_time(setup: GrpoSetup, cfg: dict, params: int, trainable: int, gpu: Any, stack: str = "cheaptune",
                   generator: Any = None, table: dict | None = None, consts: dict | None = None,
                   at_cap: bool = False) -> GrpoTime:
    """Seconds of one GRPO optimizer step on `setup.request.gpus` training `gpu`s (+ a server on `generator`,
    the same board when None); `consts` overrides data/grpo.yaml (the bench's fit); `at_cap`: every completion
    runs to max_completion_length even where the setup expects shorter."""
    table = table or tp.load_table()
    consts = consts or constants()
    if setup.expected_completion_length and not at_cap:
        setup = at_length(setup, setup.expected_completion_length)
    req = setup.request
    shape = tp.ModelShape.from_config(cfg, params)
    gen_gpu = generator or gpu
    prefill, decode = generation_seconds(setup, shape, cfg, gen_gpu, stack, table, consts)
    forward = logprob_seconds(setup, shape, trainable, gpu, stack, table)
    job = tp.Job(shape, req.method, setup.seq_len, req.micro_batch, req.grad_ckpt, trainable, setup.grad_accum,
                 _precision(req, gpu), req.attn, "sft", 0.0, stack)
    gpus = req.gpus
    layout = scaling.Layout(gpus, 1, (req.sharding or "ddp") if gpus > 1 else None, req.offload)
    train = tp.step_time(job, gpu, layout, table)
    parts = {"prefill": prefill, "decode": decode, "policy_logprobs": setup.policy_logprob_passes * forward,
             "reference_logprobs": setup.reference_passes * forward, "train": train.step_seconds,
             "weight_sync": sync_seconds(setup, shape, gen_gpu, stack, table),
             "overhead": float(consts["step_overhead_s"])}
    step = sum(parts.values())
    return GrpoTime(step, parts, (prefill + decode) / step, setup.completions, setup.engine_batch, train.to_dict())
