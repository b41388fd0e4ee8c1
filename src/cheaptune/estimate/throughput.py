"""Training throughput: FLOPs per token over the GPU's dense peak x a calibrated MFU.

Why this split: FLOPs per token are arithmetic on the architecture (exact up to small terms), while how
much of the peak a real run reaches is an empirical number. Keeping the empirical part in one table
(`data/mfu.yaml`, each value derived from a published measurement) lets our own runs replace it.
Work that is memory-bound rather than FLOP-bound (QLoRA dequantisation, DoRA's weight norm) is added
as seconds per optimiser micro-step, because it does not shrink with fewer tokens per step.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

MFU_FILE = Path(__file__).parent / "data" / "mfu.yaml"
CAUSAL_FRACTION = 0.5  # a causal mask computes half of the seq x seq score matrix
HOPPER_ARCHS = {"hopper", "blackwell", "cdna3"}
CONSUMER_TIERS = {"consumer", "professional"}


@dataclass(frozen=True)
class ModelShape:
    """The few architecture facts the FLOP count needs."""

    params: int
    hidden: int
    layers: int
    vocab: int
    tied_embeddings: bool
    active_params: int | None = None  # MoE: parameters used per token

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token (the input embedding is a lookup)."""
        used = self.active_params or self.params
        return used if self.tied_embeddings else used - self.vocab * self.hidden

    @classmethod
    def from_config(cls, config: dict[str, Any], params: int) -> ModelShape:
        cfg = config.get("text_config") or config
        hidden = int(cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model") or 0)
        layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers") or 0)
        if hidden <= 0 or layers <= 0:
            raise BadInput("model config lacks hidden_size/num_hidden_layers; pass a complete config.json")
        vocab = int(cfg.get("vocab_size") or 0)
        experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        per_tok = int(cfg.get("num_experts_per_tok") or 0)
        active = None
        if experts > 1 and per_tok:
            inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
            active = params - (experts - per_tok) * 3 * hidden * inter * layers
        return cls(params, hidden, layers, vocab, bool(cfg.get("tie_word_embeddings", False)), active)


@dataclass(frozen=True)
class FlopsPerToken:
    forward: float
    backward_activations: float
    backward_weights: float
    recompute: float

    @property
    def total(self) -> float:
        return self.forward + self.backward_activations + self.backward_weights + self.recompute


def flops_per_token(
    shape: ModelShape, method: str, seq_len: int, grad_ckpt: bool, trainable_params: int = 0
) -> FlopsPerToken:
    """Training FLOPs per token. Backward = input gradients (one forward's matmuls, two of attention's,
    which has no weights) + weight gradients (one forward's matmuls, only where trainable)."""
    attn = 2 * 2 * seq_len * shape.hidden * shape.layers * CAUSAL_FRACTION
    fwd = 2 * shape.matmul_params + attn
    full = method == "full"
    adapters = 0 if full else 2 * trainable_params
    return FlopsPerToken(
        forward=fwd + adapters,
        backward_activations=2 * shape.matmul_params + 2 * attn + adapters,
        backward_weights=2 * shape.matmul_params if full else adapters,
        recompute=fwd + adapters if grad_ckpt else 0.0,
    )


@functools.lru_cache(maxsize=4)
def load_mfu_table(path: Path = MFU_FILE) -> dict[str, Any]:
    """The calibration table; a malformed file is one BadInput line."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
        _ = doc["classes"], doc["method_kind"], doc["overheads"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise BadInput(f"{path}: not a valid MFU table ({err}); restore it from the package") from None
    return doc


def gpu_class(gpu: Any) -> str:
    """Calibration class of a GpuSpec-like object (arch and tier attributes)."""
    if getattr(gpu, "arch", "") in HOPPER_ARCHS:
        return "hopper"
    if getattr(gpu, "tier", "") in CONSUMER_TIERS:
        return "consumer"
    return "datacenter"


def peak_flops(gpu: Any, precision: str = "bf16") -> tuple[float, str]:
    """Dense tensor peak in FLOP/s and the dtype used: bf16, else fp16 where bf16 is missing, fp32 for fp32."""
    if precision == "fp32":
        return gpu.fp32_tflops * 1e12, "fp32"
    if getattr(gpu, "bf16", False) and gpu.bf16_tflops:
        return gpu.bf16_tflops * 1e12, "bf16"
    if gpu.fp16_tflops:
        return gpu.fp16_tflops * 1e12, "fp16"
    return gpu.fp32_tflops * 1e12, "fp32"


@dataclass(frozen=True)
class Throughput:
    tokens_per_s: float
    mfu: float
    dtype: str
    peak_tflops: float
    flops_per_token: float
    step_overhead_s: float  # memory-bound seconds per micro-step (QLoRA dequant, DoRA norm)
    mfu_source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_overhead_s(shape: ModelShape, method: str, gpu: Any, grad_ckpt: bool, table: dict) -> float:
    """Seconds per micro-step of memory-bound passes over the base weights."""
    key = {"qlora": "qlora_dequant", "dora": "dora_norm"}.get(method)
    if key is None:
        return 0.0
    o = table["overheads"][key]
    passes = o["passes_forward"] * (2 if grad_ckpt else 1) + o["passes_backward"]
    return passes * shape.matmul_params * o["bytes_per_param"] / (gpu.mem_bw_gbs * 1e9)


def estimate_throughput(
    shape: ModelShape,
    gpu: Any,
    method: str,
    seq_len: int,
    micro_batch: int,
    grad_ckpt: bool,
    trainable_params: int = 0,
    precision: str = "bf16",
    table: dict | None = None,
) -> Throughput:
    """Tokens per second on one GPU for one method and memory configuration."""
    table = table or load_mfu_table()
    kind = table["method_kind"].get(method)
    if kind is None:
        raise BadInput(f"no throughput calibration for method {method!r}; use one of {sorted(table['method_kind'])}")
    entry = table["classes"][gpu_class(gpu)][kind]
    peak, dtype = peak_flops(gpu, precision)
    flops = flops_per_token(shape, method, seq_len, grad_ckpt, trainable_params).total
    tokens_per_step = micro_batch * seq_len
    compute_s = tokens_per_step * flops / (peak * entry["mfu"])
    overhead = step_overhead_s(shape, method, gpu, grad_ckpt, table)
    return Throughput(
        tokens_per_s=tokens_per_step / (compute_s + overhead),
        mfu=entry["mfu"],
        dtype=dtype,
        peak_tflops=peak / 1e12,
        flops_per_token=flops,
        step_overhead_s=overhead,
        mfu_source=entry["source"],
    )
