"""Public API: peak training VRAM for one (model, method, batch, ...) request, and the micro-batch that fits.

The number comes from simulating two real training steps of the model's Hugging Face class on fake
tensors (cold path, imports torch), plus the CUDA-side overheads of data/overheads.yaml; results are
cached on disk, and a warm call reads JSON only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.estimate.memory import cache
from cheaptune.estimate.memory.mechanisms import resident_bytes
from cheaptune.estimate.memory.profiles import get_profile
from cheaptune.estimate.memory.result import FitResult, MemoryEstimate, fit_with, with_range
from cheaptune.estimate.memory.sharding import FsdpRun, check_sharding, shard_estimate
from cheaptune.estimate.policy import (
    ATTNS,
    DEFAULT_PRECISION,
    DEFAULT_QUANT,
    INT8_REFUSAL,
    LOSSES,
    METHODS,
    OBJECTIVES,
    OPTIMIZERS,
    PRECISIONS,
    QUANTS,
)

__all__ = ["DEFAULT_PRECISION", "EstimateRequest", "FitResult", "MemoryEstimate", "estimate_memory",
           "fit_micro_batch"]
ESTIMATOR_VERSION = "17"  # bump when the simulation changes: 2 QLoRA 16-bit bases refused; 3 DPO/ORPO steps; 4 litgpt fused GELU; 5 load-time peak; 6 OSF as peft < 0.21 ran it; 7 litgpt fp32 outputs, fused qkv, math SDPA in 16 bits; 8 torchtune 0.1 init replayed through the caching allocator; 9 hf profile: peft's fp32 adapters under bf16-true; 10 version-dependent terms from trainer and library versions (versions.py), torchtune 0.1 init replay and peft < 0.21 OSF removed; 11 unsloth offloaded checkpointing, litgpt untied and 4-bit head, fp16 quant state; 12 foreach AdamW temporaries (HF Trainer on torch < 2.8, litgpt); 13 litgpt repeats k and v per query head; 14 unsloth in-place fused cross-entropy and logits cast to the checkpoint dtype, gradients held across accumulation micro-steps; 15 litgpt's loop holds the last micro-step's logits and graph through the next forward, its k/v repeat and foreach AdamW left out; 16 each gemm_4bit's dequantized weight held while that op runs, backward's seen dequantize not added again; 17 unsloth's LoRA and RMSNorm kernels keep what they save, xformers' repeated K/V
PEFT_METHODS = ("lora", "qlora", "dora")


@dataclass(frozen=True)
class EstimateRequest:
    """One training configuration. `model`: catalog name, hub id, config.json path, local dir or config dict."""

    model: Any
    method: str
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: str = "all-linear"
    micro_batch: int = 1
    seq_len: int = 2048
    precision: str | None = None  # None: DEFAULT_PRECISION[method]
    quant: str | None = None  # None: nf4-dq for qlora
    grad_ckpt: bool = False
    optimizer: str = "adamw"
    attn: str = "sdpa"
    loss: str | None = None  # None: the trainer's; trl (chunked head) | hf (full fp32 logits) | chunked (per chunk)
    gpus: int = 1
    sharding: str | None = None  # ddp (default with gpus > 1) | fsdp | zero2 | zero3
    offload: bool = False  # fsdp/zero: sharded model state in host RAM
    allow_long_context: bool = False
    full_sim: bool = False  # simulate every block instead of extrapolating from 1-2 periods
    trainer: str = "cheaptune"  # whose step is simulated: estimate/data/profiles.yaml
    lora_dropout: float | None = None  # None: the trainer's default
    versions: str | None = None  # 'lib==X,...' pins (the trainer's own too): version-dependent terms (versions.py)
    autocast_adapter_dtype: bool | None = None  # None: the trainer's; peft's fp32 cast of the adapters (profiles.py)
    peft_config: str | None = None  # a PEFT config as JSON (PeftConfig.to_dict()): the adapter built, any method peft has
    objective: str = "sft"  # sft | dpo | orpo: trl's preference step (simulate.preference_forward)
    precompute_ref: bool = False  # dpo, full: reference log-probs precomputed, so no reference copy is held
    grad_accum: int = 1  # micro-steps per optimizer step: > 1 holds every gradient into the next micro-step's forward
    train_modules: str | None = None  # whole modules trained beside a LoRA adapter (peft modules_to_save): embed_tokens,lm_head


def model_config(model) -> tuple[dict, str]:
    """(config.json dict, label) without importing torch."""
    if isinstance(model, dict):
        return dict(model), model.get("_name_or_path") or model.get("model_type", "config")
    if hasattr(model, "to_dict"):
        return model.to_dict(), getattr(model, "_name_or_path", "") or model.model_type
    name = str(model)
    try:
        from cheaptune.catalog.models import resolve_model
    except ImportError:
        resolve_model = None
    if resolve_model is not None:
        spec = resolve_model(name)
        return dict(spec.config), spec.id
    path = Path(name).expanduser()
    path = path / "config.json" if path.is_dir() else path
    if path.is_file():
        try:
            return json.loads(path.read_text()), name
        except ValueError as err:
            raise BadInput(f"{path} is not valid JSON ({err}); pass a model's config.json") from None
    raise BadInput(f"unknown model {name!r}; pass a hub id from the catalog, a config.json or a model folder")


def _context_length(cfg: dict) -> int | None:
    for k in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"):
        if isinstance(cfg.get(k), int):
            return cfg[k]
    return None


def normalize(req: EstimateRequest, cfg: dict) -> EstimateRequest:
    """Fill defaults and reject impossible requests, one line each."""
    def choice(val, allowed, flag):
        if val not in allowed:
            raise BadInput(f"{flag} {val!r} is not one of {', '.join(allowed)}")

    choice(req.method, METHODS, "--method")
    profile = get_profile(req.trainer)
    versions = _pins(req, profile)
    precision = req.precision or profile.default_precision(req.method)
    loss = req.loss or profile.loss
    choice(precision, PRECISIONS, "--precision")
    choice(req.optimizer, OPTIMIZERS, "--optimizer")
    choice(req.attn, ATTNS, "--attn")
    choice(loss, LOSSES, "--loss")
    choice(req.objective, OBJECTIVES, "--objective")
    if req.precompute_ref and req.objective != "dpo":
        raise BadInput("--precompute-ref is for --objective dpo (only DPO has a reference model)")
    if req.peft_config is not None and req.method == "full":
        raise BadInput("a PEFT config needs an adapter method (lora, qlora for a 4-bit base, ...), not full")
    if req.lora_dropout is not None and not 0 <= req.lora_dropout < 1:
        raise BadInput(f"lora dropout must be in [0, 1) (got {req.lora_dropout})")
    quant = req.quant or DEFAULT_QUANT.get(req.method)
    if quant == "int8":
        raise BadInput(INT8_REFUSAL)
    if quant is not None:
        choice(quant, QUANTS, "--quant")
        if req.method != "qlora":
            raise BadInput(f"--quant {quant} needs --method qlora (it quantizes the frozen base weights)")
    sharding = check_sharding(req.gpus, req.sharding, req.offload) if req.gpus != 1 or req.sharding else None
    if req.offload and sharding is None:
        raise BadInput("--offload needs --sharding fsdp, zero2 or zero3")
    if req.micro_batch < 1 or req.seq_len < 1 or req.grad_accum < 1:
        raise BadInput(f"--micro-batch, --seq-len and --grad-accum must be >= 1 (got {req.micro_batch}, {req.seq_len}, "
                       f"{req.grad_accum})")
    if req.method in PEFT_METHODS and (req.lora_r < 1 or req.lora_alpha <= 0):
        raise BadInput(f"--lora-r must be >= 1 and --lora-alpha > 0 (got {req.lora_r}, {req.lora_alpha})")
    ctx = _context_length(cfg)
    if ctx and req.seq_len > ctx and not req.allow_long_context:
        raise BadInput(f"--seq-len {req.seq_len} is beyond the model's context of {ctx} tokens; "
                       "lower it or pass --allow-long-context")
    return dataclasses.replace(req, precision=precision, quant=quant, sharding=sharding, loss=loss,
                               trainer=profile.name, versions=versions)


def _pins(req: EstimateRequest, profile) -> str | None:
    """The request's version pins, normalized, with the trainer's own version (`--trainer litgpt==0.4.9`)."""
    from cheaptune.estimate.memory.versions import join_pins, parse_pins, split_trainer

    pins = parse_pins(req.versions)
    _, own = split_trainer(req.trainer)
    if own is not None:
        if not profile.package:
            raise BadInput(f"--trainer {req.trainer!r}: the {profile.name} profile is what cheaptune runs now; "
                           "drop the ==version")
        pins[profile.package] = own
    return join_pins(pins)


def _inputs(req: EstimateRequest, label: str) -> dict:
    d = dataclasses.asdict(req)
    d["model"] = label
    if d["objective"] == "sft":  # SFT inputs (and so their cache keys) as before preference tuning existed
        del d["objective"], d["precompute_ref"]
    for opt in ("peft_config", "versions"):  # named only where set,
        if not d[opt]:  # so other keys stay as they were
            del d[opt]
    for opt in ("autocast_adapter_dtype",):
        if d[opt] is None:
            del d[opt]
    if d["grad_accum"] == 1:  # one micro-step per optimizer step: the keys of before accumulation was simulated
        del d["grad_accum"]
    return d


def estimate_memory(req: EstimateRequest) -> MemoryEstimate:
    """Peak VRAM of one training step (step 2, steady state) per GPU; cached on disk.

    On several GPUs one GPU's step is simulated and then the model state is split (or replicated)
    as the sharding does it (estimate.sharding); the micro-batch is per GPU either way.
    """
    cfg, label = model_config(req.model)
    req = normalize(req, cfg)
    return with_range(_point_estimate(req, cfg, label), req.method)


def _point_estimate(req: EstimateRequest, cfg: dict, label: str) -> MemoryEstimate:
    """The simulated estimate (no range), for one GPU or sharded over several."""
    if req.gpus > 1:
        single = _point_estimate(dataclasses.replace(req, gpus=1, sharding=None, offload=False), cfg, label)
        return shard_estimate(single, req.gpus, req.sharding, req.offload, model_config=cfg,
                              fsdp_run=FsdpRun.of(req))
    inputs = _inputs(req, label)
    resident = resident_bytes(req, cfg)  # keyed only where held, so every other key stays as it was
    k = cache.key({**inputs, "estimator": ESTIMATOR_VERSION, **({"resident_bytes": resident} if resident else {})},
                  cfg)  # a new simulation drops old entries
    hit = cache.load(k)
    if hit is not None:
        return MemoryEstimate(**hit)
    from cheaptune.estimate.memory.compute import compute  # cold path: imports torch

    est = compute(req, cfg, inputs, ESTIMATOR_VERSION)
    cache.store(k, dataclasses.asdict(est))
    return est


def fit_micro_batch(req: EstimateRequest, gpu_memory_bytes: int, headroom: float = 0.10,
                    max_micro_batch: int = 64) -> FitResult | None:
    """Largest micro-batch whose device total fits in gpu_memory*(1-headroom); None if even 1 does not.

    Tries without gradient checkpointing first (it costs ~1/3 more compute), then with it. At fixed
    seq_len memory is affine in the micro-batch (activations and logits scale with b, weights do not),
    so two estimates (b=1, b=2) predict the largest fit; that candidate is confirmed with one more
    estimate and stepped down only if the affine guess was optimistic.
    """
    def estimate_at(b: int, gc: bool) -> MemoryEstimate:
        return estimate_memory(dataclasses.replace(req, micro_batch=b, grad_ckpt=gc))

    return fit_with(estimate_at, gpu_memory_bytes * (1 - headroom), max_micro_batch)


def fit_micro_batch_sharded(req, gpu_memory_bytes: int, gpus: int, sharding: str = "ddp", offload: bool = False,
                            headroom: float = 0.10, max_micro_batch: int = 64, model_config: dict | None = None):
    """fit_micro_batch for N GPUs: the largest per-GPU micro-batch whose per-GPU device
    total fits, without gradient checkpointing first; None when even micro-batch 1 does not fit."""
    def estimate_at(b: int, gc: bool):
        single = estimate_memory(dataclasses.replace(req, micro_batch=b, grad_ckpt=gc, gpus=1, sharding=None))
        return shard_estimate(single, gpus, sharding, offload, model_config, FsdpRun.of(req))

    return fit_with(estimate_at, gpu_memory_bytes * (1 - headroom), max_micro_batch)
