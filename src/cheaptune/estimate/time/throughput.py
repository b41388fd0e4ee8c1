"""Training time per optimizer step: compute, fixed cost, QLoRA dequant, optimizer step and communication.

Why a step-time model instead of one MFU per GPU class: what a fine-tune's step costs depends on how
many tokens each matmul sees (small micro-steps waste the GPU), the model width, a per-layer cost that
does not shrink with tokens (kernel launches and host overhead per layer, and per adapted linear: LoRA's
small kernels; the launch-bound floor that dominates at few tokens per micro-step), memory-bound work (the elementwise ops
between the matmuls, the optimizer step, QLoRA dequantisation) and what the sharding strategy sends over which link. Each part is
arithmetic on the architecture over a rate with a cited source; fitted constants name their rows
(`data/steptime.yaml`); FSDP on 2+ GPUs adds a fitted fixed cost per layer per micro-step (`sharded`,
scaling.gathers_per_unit). The efficiency and fixed cost are per trainer stack (`stacks`), each fitted on its own
stack's rows only: a compiled, hand-tuned stack's speed is not the Hugging Face stack's. FLOPs per token follow the usual count (forward 2N + attention; backward twice
that for activations, weight gradients only where trainable; one more forward under checkpointing).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import compute_dtype
from cheaptune.estimate.time import scaling

DATA = Path(__file__).parents[1] / "data" / "steptime.yaml"
CAUSAL_FRACTION = 0.5  # a causal mask computes half of the seq x seq score matrix
ATTN_KERNELS = ("sdpa", "flash", "eager")
FLASH_MIN_CC = 8.0  # FlashAttention-2 needs sm80+ (Ampere); older NVIDIA boards run the memory-efficient kernel
ADAPTER_METHODS = ("lora", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning")
GRAD_BYTES = {"full": 2}  # bf16-true full fine-tunes keep bf16 gradients; adapters train in fp32
LINEAR_ADAPTERS = ("lora", "qlora", "dora", "ia3")  # methods that wrap linear layers (a per-module fixed cost)
# Linears per Llama-style block (q, k, v, o; gate, up, down) each target name or preset
# (estimate/memory/targets.py) wraps; lm_head is one per model, not per block. Another name counts one.
BLOCK_LINEARS = {"q": 1, "k": 1, "v": 1, "o": 1, "gate": 1, "up": 1, "down": 1, "qv": 2, "attention": 4,
                 "mlp": 3, "all-linear": 7, "lm_head": 0}


def adapted_per_layer(targets: str | None) -> int:
    """Linear layers per transformer block an adapter wraps, from LoRA-style targets ('q,v', 'qv', 'mlp',
    'all-linear'; empty or None is all-linear, cheaptune's default). Each wrapped linear launches its own
    small kernels per micro-step (peft: lora_B(lora_A(dropout(x))) * scaling, added to the base output)."""
    names = [t.strip().removesuffix("_proj") for t in (targets or "").split(",") if t.strip()]
    return sum(BLOCK_LINEARS.get(n, 1) for n in names) if names else BLOCK_LINEARS["all-linear"]


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
    attention: float  # the part of the total spent in attention (no weights), all passes
    reference: float = 0.0  # DPO's reference forward (reference_passes)

    @property
    def total(self) -> float:
        return self.forward + self.backward_activations + self.backward_weights + self.recompute + self.reference

    @property
    def model(self) -> float:
        """FLOPs that count towards MFU: the total without checkpoint recompute."""
        return self.total - self.recompute


def reference_passes(objective: str, precompute_ref: bool = False, epochs: float = 1.0) -> float:
    """Reference forwards per trained token.

    DPO scores every row (chosen and rejected) with the reference model: one forward of the frozen weights
    under no_grad (for PEFT the base with adapters disabled, so no adapter FLOPs), with no backward and
    no checkpoint recompute, once per row per epoch: a factor 1. Precomputed (trl's
    precompute_ref_log_probs), that forward runs once over the data before training, so per trained token
    it is 1/epochs of a forward (more than one below an epoch: the whole set is scored). ORPO's odds ratio
    and SFT use the policy alone: 0. The pair itself needs no factor: its two rows are counted as tokens.
    """
    if objective != "dpo":
        return 0.0
    return 1.0 / epochs if precompute_ref else 1.0


def flops_per_token(
    shape: ModelShape, method: str, seq_len: int, grad_ckpt: bool, trainable_params: int = 0,
    reference: float = 0.0, saved_matmul_params: int = 0,
) -> FlopsPerToken:
    """Training FLOPs per token. Backward = input gradients (one forward's matmuls, two of attention's,
    which has no weights) + weight gradients (one forward's matmuls, only where trainable); `reference`
    plain forwards of the frozen model on top (reference_passes). `saved_matmul_params`: weights of whole linear
    modules an adapter trains in place (peft modules_to_save, e.g. an LM head): a weight gradient each and no more,
    as their forward is the frozen module's, already counted (Job.saved_params)."""
    attn = 2 * 2 * seq_len * shape.hidden * shape.layers * CAUSAL_FRACTION
    fwd = 2 * shape.matmul_params + attn
    full = method == "full"
    adapters = 0 if full else 2 * trainable_params
    return FlopsPerToken(
        forward=fwd + adapters,
        backward_activations=2 * shape.matmul_params + 2 * attn + adapters,
        backward_weights=2 * shape.matmul_params if full else adapters + 2 * saved_matmul_params,
        recompute=fwd + adapters if grad_ckpt else 0.0,
        attention=attn * ((4 if grad_ckpt else 3) + reference),
        reference=reference * fwd,
    )


@functools.lru_cache(maxsize=4)
def load_table(path: Path = DATA) -> dict[str, Any]:
    """The constants; a malformed file is one BadInput line."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
        _ = doc["sustained_fraction"], doc["sustained_bandwidth"], doc["stacks"], doc["trainers"], doc["links"], doc["overlap"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise BadInput(f"{path}: not a valid step-time table ({err}); restore it from the package") from None
    return doc


def _v(entry: Any) -> float:
    return float(entry["value"] if isinstance(entry, dict) else entry)


def peak_flops(gpu: Any, precision: str = "bf16") -> tuple[float, str]:
    """Dense tensor peak in FLOP/s and the dtype used: bf16, else fp16 where bf16 is missing, fp32 for fp32."""
    if precision == "fp32":
        return gpu.fp32_tflops * 1e12, "fp32"
    if getattr(gpu, "bf16", False) and gpu.bf16_tflops:
        return gpu.bf16_tflops * 1e12, "bf16"
    if gpu.fp16_tflops:
        return gpu.fp16_tflops * 1e12, "fp16"
    return gpu.fp32_tflops * 1e12, "fp32"


def sustained_rate(gpu: Any, precision: str, table: dict) -> float:
    """FLOP/s a large matmul sustains on this board: datasheet peak x the measured (or assumed) fraction
    (steptime.yaml sustained_fraction). Where the board's clock falls under sustained load (`power_bound`) the
    fraction is the lowest reading any source gives: a seconds-long benchmark can run above the clock a power-capped
    board keeps for the hours a fine-tune runs."""
    sf = table["sustained_fraction"]
    return peak_flops(gpu, precision)[0] * _v(sf["boards"].get(gpu.name, sf["default"]))


def sustained_bandwidth(gpu: Any, table: dict) -> tuple[float, str]:
    """(bytes/s a streaming copy sustains on this board, its label): the datasheet bandwidth x the measured fraction
    (steptime.yaml sustained_bandwidth, from bench/data/membw_measured.csv), or x the stated fallback, labelled
    `assumption`, for a board with no measurement. Every memory-bound term divides by this: a copy does not reach
    the datasheet figure, as a matmul does not reach its peak."""
    sb = table["sustained_bandwidth"]
    entry = sb["boards"].get(gpu.name, sb["default"])
    label = entry.get("label", "measured") if isinstance(entry, dict) else "measured"
    return gpu.mem_bw_gbs * 1e9 * _v(entry), label


def _borrowed(table: dict, stack: str) -> list[str]:
    """`stack`, then each stack it borrows from (steptime.yaml stacks' `same_as`), nearest first."""
    stacks, chain = table["stacks"], [stack]
    while "same_as" in stacks.get(chain[-1], {}):
        chain.append(stacks[chain[-1]]["same_as"])
    return chain


def stack_constants(table: dict, stack: str) -> dict[str, Any]:
    """The efficiency and fixed-cost constants of trainer stack `stack` (following `same_as`)."""
    stacks, last = table["stacks"], _borrowed(table, stack)[-1]
    if last not in stacks:
        raise BadInput(f"no step-time constants for trainer stack {stack!r}; use one of {', '.join(stacks)}")
    return stacks[last]


def clips_gradients(stack: str, table: dict | None = None) -> bool:
    """Whether trainer stack `stack` clips the gradient norm each optimizer step by default (steptime.yaml
    optimizer.clips_gradients: its own entry, else the nearest stack it borrows from, else `default`)."""
    table = table or load_table()
    flags = table["optimizer"]["clips_gradients"]
    own = next((s for s in _borrowed(table, stack) if s in flags), "default")
    return bool(flags[own])


def stack_for(trainer: str, table: dict | None = None) -> str:
    """The time stack of a trainer profile (estimate/data/profiles.yaml): its own where it has one."""
    table = table or load_table()
    return str(table["trainers"].get(trainer, trainer))


def elementwise_bytes_per_token(shape: ModelShape, job: Job, consts: dict) -> float:
    """HBM bytes per token of the memory-bound work between the matmuls (norms, activations, residual adds,
    RoPE, dropout, casts): the stack's bytes per hidden element per pass (`elementwise_bytes`, fitted) x hidden x
    layers x passes (forward, backward counted twice, checkpoint recompute, reference forwards). Why: these ops do
    O(1) FLOPs per byte, so they run at the memory bandwidth, not the matmul rate (Ivanov et al., "Data Movement
    Is All You Need", arXiv:2007.00072: transformer training is memory-bound), and a board's FLOPs per byte
    differ from another's (H100 and L40S have about twice the A100's)."""
    passes = 3 + (1 if job.grad_ckpt else 0) + job.reference
    return _v(consts.get("elementwise_bytes", 0.0)) * shape.hidden * shape.layers * passes


def attention_efficiency(attn: str, gpu: Any, table: dict) -> float:
    """Attention's efficiency against the matmul rate. Below compute capability 8.0 (Turing T4, Volta V100) no
    FlashAttention-2 kernel exists: SDPA (and xformers, which Unsloth calls there) runs the memory-efficient
    kernel, slower than a flash-class kernel on the same board (steptime.yaml attention_kernel.pre_sm80)."""
    kernels = table["attention_kernel"]
    eff = _v(kernels[attn])
    cc = getattr(gpu, "compute_capability", None)
    if attn != "eager" and cc and float(cc) < FLASH_MIN_CC and "pre_sm80" in kernels:
        eff = min(eff, _v(kernels["pre_sm80"]))
    return eff


def matmul_efficiency(tokens: int, hidden: int, table: dict, stack: str = "cheaptune", full: bool = False) -> float:
    """The stack's share of the sustained matmul rate a step reaches. `full`: a full fine-tune's step, whose share
    is the adapter step's times `full_ratio` (fitted, shared by every stack), at most the measured GEMM rate (1).
    Why: on the same stack, model, board and tokens, public LoRA steps save far less time than the FLOPs they drop
    (steptime.yaml `full_ratio`), so one share for both methods reads full fine-tunes slow or adapters fast."""
    e = stack_constants(table, stack)["efficiency"]
    e_max = min(1.0, _v(e["e_max"]) * (_v(e.get("full_ratio", 1.0)) if full else 1.0))
    return e_max * tokens / (tokens + _v(e["tokens_half"])) * hidden / (hidden + _v(e["hidden_half"]))


@dataclass(frozen=True)
class Job:
    """What each GPU runs per optimizer step."""

    shape: ModelShape
    method: str
    seq_len: int
    micro_batch: int
    grad_ckpt: bool = False
    trainable_params: int = 0
    grad_accum: int = 1
    precision: str = "bf16"
    attn: str = "sdpa"
    objective: str = "sft"  # dpo | orpo: micro_batch counts pairs, each two rows (chosen, rejected)
    reference: float = 0.0  # reference forwards per token (reference_passes)
    stack: str = "cheaptune"  # whose trainer runs the step (steptime.yaml stacks): cheaptune = HF Trainer/TRL
    adapted_modules: int = BLOCK_LINEARS["all-linear"]  # linears per block an adapter wraps (adapted_per_layer)
    clip_grads: bool = True  # gradient-norm clipping each optimizer step (clips_gradients: the HF Trainer's default)
    head_4bit: bool = False  # QLoRA: the LM head is a 4-bit linear too (dequant_layout: litgpt quantizes every Linear)
    dequant_cast: bool = False  # QLoRA: weights dequantise to fp16, then cast to the bf16 compute dtype (dequant_layout)
    # Whole modules an adapter method trains in place (peft modules_to_save: embed_tokens, lm_head): their weights
    # (saved_params) take gradients and AdamW state like any trainable weight, but add no forward: peft's
    # ModulesToSaveWrapper runs the trained copy instead of the frozen module (peft 0.21.2 utils/other.py
    # ModulesToSaveWrapper._forward_wrapped, pip wheel; the rows' older releases not read).
    # Only the linear ones (saved_matmul_params) add a weight gradient's FLOPs; an embedding is a lookup.
    saved_params: int = 0
    saved_matmul_params: int = 0

    @property
    def rows(self) -> int:
        """Sequences per micro-step."""
        return self.micro_batch * (1 if self.objective == "sft" else 2)


def quantized_params(shape: ModelShape, head_4bit: bool = False) -> int:
    """Weights a QLoRA step holds in 4 bits: every parameter but the embeddings, as transformers' 4-bit loader keeps
    the output embedding and tied weights in 16 bits (quantizers/base.py get_keys_to_not_convert), plus the LM head
    where the trainer quantizes every Linear (`head_4bit`; litgpt keeps its own head even where the config ties it).
    Every expert of an MoE counts: a micro-step of many tokens routes to all of them."""
    embeddings = shape.vocab * shape.hidden * (1 if shape.tied_embeddings else 2)
    return max(0, shape.params - embeddings) + (shape.vocab * shape.hidden if head_4bit else 0)


def dequant_seconds(job: Job, bw: float, table: dict) -> float:
    """One micro-step's QLoRA dequantisation: passes (forward, its recompute under checkpointing and any reference
    forward, the backward's input gradient) x 4-bit weights (quantized_params) x bytes per weight per pass, over the
    bandwidth; plus the fp16-to-bf16 cast's bytes where the trainer quantized from fp16 (`dequant_cast`, at bf16
    compute: steptime.yaml dequant.cast_bytes_per_param)."""
    dq = table["dequant"]
    passes = _v(dq["passes_forward"]) * ((2 if job.grad_ckpt else 1) + job.reference) + _v(dq["passes_backward"])
    per = _v(dq["bytes_per_param"])
    if job.dequant_cast and job.precision == "bf16":
        per += _v(dq["cast_bytes_per_param"])
    return passes * quantized_params(job.shape, job.head_4bit) * per / bw


def dequant_layout(trainer: str) -> dict[str, bool]:
    """The Job fields of a trainer's 4-bit layout, from its profile (estimate/data/profiles.yaml, the facts the memory
    simulation builds the same model from): all_linears_4bit (its head is a 4-bit Linear) and quant_state_fp16."""
    from cheaptune.estimate.memory.profiles import get_profile

    profile = get_profile(trainer)
    return {"head_4bit": profile.all_linears_4bit, "dequant_cast": profile.quant_state_fp16}


@dataclass(frozen=True)
class StepTime:
    tokens_per_s: float  # all GPUs together
    step_seconds: float  # one optimizer step
    mfu: float  # model FLOPs (no recompute) / datasheet peak of all GPUs
    parts: dict[str, float]  # compute, elementwise, communication, optimizer, dequant, fixed: seconds per step
    dtype: str
    peak_tflops: float
    flops_per_token: float
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parts"] = {k: round(v, 9) for k, v in self.parts.items()}  # ns: six parts still add up to the step
        return d


def _check(job: Job) -> None:
    if job.method != "full" and job.method not in ADAPTER_METHODS:
        raise BadInput(f"no step-time model for method {job.method!r}; use full or one of {', '.join(ADAPTER_METHODS)}")
    if job.attn not in ATTN_KERNELS:
        raise BadInput(f"--attn {job.attn!r} is not one of {', '.join(ATTN_KERNELS)}")
    if job.micro_batch < 1 or job.seq_len < 1 or job.grad_accum < 1:
        raise BadInput("micro-batch, sequence length and accumulation steps must be >= 1")


def step_time(job: Job, gpu: Any, layout: scaling.Layout | None = None, table: dict | None = None) -> StepTime:
    """Seconds per optimizer step and tokens/s of `job` on `layout` (one GPU when None)."""
    _check(job)
    table = table or load_table()
    layout = layout or scaling.Layout()
    shape, tokens = job.shape, job.rows * job.seq_len
    f = flops_per_token(shape, job.method, job.seq_len, job.grad_ckpt, job.trainable_params, job.reference,
                        job.saved_matmul_params)
    rate = sustained_rate(gpu, job.precision, table) * matmul_efficiency(tokens, shape.hidden, table, job.stack,
                                                                     job.method == "full")
    attn_eff = attention_efficiency(job.attn, gpu, table)
    micro_compute = tokens * ((f.total - f.attention) / rate + f.attention / (rate * attn_eff))
    kind = "full" if job.method == "full" else "adapter"
    consts = stack_constants(table, job.stack)
    fixed = consts["fixed_per_layer_s"]
    wrapped = job.adapted_modules if job.method in LINEAR_ADAPTERS else 0
    sharded = _v(fixed.get("sharded", 0.0)) if scaling.gathers_per_unit(layout) else 0.0
    micro_fixed = shape.layers * (_v(fixed[kind]) + wrapped * _v(fixed.get("per_module", 0.0)) + sharded)
    bw = sustained_bandwidth(gpu, table)[0]
    micro_elementwise = tokens * elementwise_bytes_per_token(shape, job, consts) / bw
    micro_dequant = dequant_seconds(job, bw, table) if job.method == "qlora" else 0.0
    dq = table["dequant"]
    trainable = shape.params if job.method == "full" else job.trainable_params + job.saved_params
    weight_bytes = 2.0 if job.precision != "fp32" else 4.0
    stored = shape.params * (_v(dq["stored_bytes_per_param"]) if job.method == "qlora" else weight_bytes)
    if job.method != "full":
        stored += 4 * trainable
    grads = trainable * GRAD_BYTES.get(job.method, 4)
    comm = scaling.communication(layout, gpu, stored, grads, table, scaling.gathers_per_micro(layout, job.grad_ckpt))
    opt = table["optimizer"]
    shard = layout.gpus if layout.sharding in scaling.SHARDED_OPTIMIZER else 1
    per_param = _v(opt["bytes_per_param"]) + (_v(opt["clip_bytes_per_param"]) if job.clip_grads else 0.0)
    opt_bytes = trainable / shard * per_param
    optimizer_s = (opt_bytes / _v(opt["cpu_bytes_per_s"]) if layout.offload
                   else opt_bytes / bw)
    accum = job.grad_accum
    compute_s = accum * micro_compute
    exposed = scaling.exposed_seconds(comm, layout, accum, micro_compute + micro_elementwise, shape.layers, table)
    parts = {"compute": compute_s, "elementwise": accum * micro_elementwise, "communication": exposed,
             "optimizer": optimizer_s, "dequant": accum * micro_dequant, "fixed": accum * micro_fixed}
    step_s = sum(parts.values())
    total_tokens = tokens * accum * layout.gpus
    peak, dtype = peak_flops(gpu, job.precision)
    tps = total_tokens / step_s
    return StepTime(tokens_per_s=tps, step_seconds=step_s, mfu=f.model * tps / (peak * layout.gpus), parts=parts,
                    dtype=dtype, peak_tflops=peak / 1e12, flops_per_token=f.total, gpus=layout.gpus)


def trained_module_params(cfg: dict, names: str | None) -> tuple[int, int]:
    """(weights, linear weights) of the whole modules an adapter trains in place (peft modules_to_save, named as
    --train-modules names them): embed_tokens and lm_head are vocab x hidden each, and only the head is a matmul
    (Job.saved_params). Other module names count nothing here: their weights stay among the trainable ones."""
    wanted = {n.strip() for n in (names or "").split(",") if n.strip()}
    each = int(cfg.get("vocab_size", 0) or 0) * int(cfg.get("hidden_size", 0) or 0)
    head = "lm_head" in wanted
    return (("embed_tokens" in wanted) + head) * each, head * each


def step_time_for(req: Any, trainable_params: int, gpu: Any, gpus_per_node: int = 1, nodes: int = 1,
                  grad_accum: int = 1, network: str = "ethernet", epochs: float = 1.0) -> StepTime:
    """The step time of an estimate request (estimate.memory.EstimateRequest) on `gpu`: what
    `cheaptune estimate --gpu` prints, with the same model the planner prices with."""
    from cheaptune.catalog.models import count_params
    from cheaptune.estimate.memory.memory import model_config

    cfg, _ = model_config(req.model)
    precision = compute_dtype(req.precision, getattr(gpu, "bf16", False))
    saved, saved_matmul = trained_module_params(cfg, getattr(req, "train_modules", None))
    job = Job(ModelShape.from_config(cfg, count_params(cfg)), req.method, req.seq_len, req.micro_batch,
              req.grad_ckpt, max(0, trainable_params - saved), grad_accum, precision, req.attn, req.objective,
              reference_passes(req.objective, req.precompute_ref, epochs), stack_for(req.trainer),
              adapted_per_layer(getattr(req, "lora_targets", None)), clips_gradients(stack_for(req.trainer)),
              **dequant_layout(req.trainer), saved_params=saved, saved_matmul_params=saved_matmul)
    gpus = gpus_per_node * nodes
    sharding = (req.sharding or "ddp") if gpus > 1 else None
    return step_time(job, gpu, scaling.Layout(gpus_per_node, nodes, sharding, req.offload, network))
