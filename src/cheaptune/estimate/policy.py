"""The one training policy: the estimator simulates it and the trainer (cheaptune.train) reads it.

Precision names: `bf16-true` keeps every tensor (base weights, adapters, grads, optimizer state) in
bf16 with no autocast (HF Trainer bf16=False on a bf16-loaded model); `bf16-mixed` / `fp16-mixed`
keep trainable weights in fp32 (master copy) and run under autocast (Trainer bf16/fp16=True), while
frozen base weights stay 16-bit (nothing to update, so no master copy); `fp32` is fp32 throughout.

Defaults on a GPU, chosen for the cheapest run that still trains well:
- full: bf16-true. 8 B/param with AdamW instead of 16 for fp32 master weights: a 7B model fits one
  80 GB GPU instead of needing two. torchtune's single-device full fine-tuning and LLaMA-Factory's
  pure_bf16 do the same. The known risk: with very small learning rates (~1e-6) bf16 rounds some
  updates away; `precision: bf16-mixed` (trainer) / `--precision bf16-mixed` (estimate) is the safe choice.
- lora, dora, ia3, prompt/prefix tuning: bf16-mixed: bf16 frozen base, fp32 adapters (peft's
  autocast_adapter_dtype=True), bf16 autocast. Adapters are small, so fp32 costs little and is the
  field's standard (peft, trl, axolotl).
- qlora: bf16-true: NF4 base with bf16 compute; adapters bf16 whatever the precision, because trl
  casts a quantized model's trainable weights to bf16 (QLoRA paper; DoRA magnitudes excepted). The
  frozen non-quantized weights (embeddings, norms, head) stay 16-bit: no peft
  prepare_model_for_kbit_training, whose fp32 upcast costs 2x on the embeddings for nothing.
Other settings: AdamW = torch AdamW fused (HF `adamw_torch_fused`; torch has a fused kernel on CUDA
and CPU, and it needs no foreach temporaries), LoRA dropout 0.0 (peft's, torchtune's and Unsloth's
default; >0 stores a dropped copy of each adapted module's input, ~10% more activation memory at
all-linear), 20 virtual tokens for prompt/prefix tuning (peft's examples), gradient checkpointing
non-reentrant, use_cache=False, padding-free packing (no attention mask), and trl's loss: a chunked
LM head that never materialises the [tokens, vocab] logits (trl.trainer.utils.add_fused_lm_head).
On CPU the trainer runs fp32 unless asked (tests, smoke runs); the estimator always simulates the
GPU policy, since that is what a plan rents.
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("full", "lora", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning")
PRECISIONS = ("bf16-true", "bf16-mixed", "fp16-mixed", "fp32")
# 4-bit NF4 only: an LLM.int8 base is neither simulated nor trained, so it is refused everywhere (INT8_REFUSAL).
QUANTS = ("nf4", "nf4-dq")
INT8_REFUSAL = ("an int8 (LLM.int8) base is not supported by cheaptune's estimate or trainer; use quant nf4 or "
                "nf4-dq (QLoRA), or method lora on a 16-bit base")
# "adamw" is torch's AdamW as the trainer profile builds it (ours: fused; a profile with foreach_adamw: the multi-tensor
# step); "adamw-fused" is torch's fused AdamW whatever the profile (a run that sets fused=True or optim
# adamw_torch_fused itself, e.g. torchtune's and Axolotl's configs), with no foreach temporaries.
OPTIMIZERS = ("adamw", "adamw-fused", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor")
ATTNS = ("sdpa", "flash", "eager")
# "trl": our trainer (trl SFTTrainer's chunked LM head, no full logits); "hf": a plain transformers Trainer,
# whose loss materialises fp32 logits over the whole vocabulary (for users who train that way).
# "chunked": logits and cross-entropy chunk by chunk, as litgpt and torchtune do (estimate/memory/profiles.py).
LOSSES = ("trl", "hf", "chunked")
OBJECTIVES = ("sft", "dpo", "orpo")  # the trl trainer a run uses: SFTTrainer, DPOTrainer, ORPOTrainer

DEFAULT_PRECISION: dict[str, str] = {
    "full": "bf16-true",
    "lora": "bf16-mixed",
    "qlora": "bf16-true",
    "dora": "bf16-mixed",
    "ia3": "bf16-mixed",
    "prompt_tuning": "bf16-mixed",
    "prefix_tuning": "bf16-mixed",
}
# On a GPU without bf16 (T4, V100): fp16 needs loss scaling over fp32 master weights.
NO_BF16_PRECISION = "fp16-mixed"
DEFAULT_QUANT = {"qlora": "nf4-dq"}
DEFAULT_OPTIMIZER = "adamw"
# Micro-steps the memory simulation runs per optimizer step, at most: with accumulation the second holds the first's
# gradients (zero_grad comes only after the optimizer step), like every later one, so any accumulation of 2 or more
# sizes as 2 and shares one cached estimate.
HELD_MICRO_STEPS = 2
LORA_DROPOUT = 0.0
VIRTUAL_TOKENS = 20
QLORA_ADAPTER_DTYPE = "bfloat16"  # trl's cast for quantized models (SFTTrainer.__init__)
# What trl 1.16's SFTTrainer asks its fused LM head for: the loss and the entropy/accuracy metrics.
FUSED_HEAD_OUTPUTS = ("log_probs", "entropy", "is_top1")
# Trainer `optim` names (transformers OptimizerNames) per device. Fused AdamW exists on both.
HF_OPTIM: dict[str, dict[str, str]] = {
    "cuda": {
        "adamw": "adamw_torch_fused",
        "adamw-fused": "adamw_torch_fused",
        "adamw-8bit": "adamw_bnb_8bit",
        "paged-adamw-8bit": "paged_adamw_8bit",
        "sgd": "sgd",
        "adafactor": "adafactor",
    },
}
HF_OPTIM["cpu"] = dict(HF_OPTIM["cuda"])


def training_precision(method: str, gpu_bf16: bool) -> str:
    """The precision a run of `method` uses on a GPU with (or without) bf16: the one the plan's fit
    simulates and the trainer runs, so plan and run never disagree."""
    return DEFAULT_PRECISION[method] if gpu_bf16 else NO_BF16_PRECISION


def compute_dtype(precision: str | None, gpu_bf16: bool) -> str:
    """The dtype a run's matmuls use at a training precision on a board, for the time model: fp32 at fp32,
    else the half type, bf16 where the board has it and the precision is not fp16 (None: the default)."""
    if precision == "fp32":
        return "fp32"
    return "bf16" if gpu_bf16 and not (precision or "").startswith("fp16") else "fp16"


def hf_optim(optimizer: str = DEFAULT_OPTIMIZER, device: str = "cuda") -> str:
    """The HF `optim` name for one of our optimizer names (`adamw_8bit` spelling accepted too)."""
    return HF_OPTIM[device][optimizer.replace("_", "-")]


@dataclass(frozen=True)
class Policy:
    """Resolved dtypes (torch dtype names) for one method and precision."""

    base: str  # frozen / all weights (for QLoRA: the non-quantized ones and the compute dtype)
    adapter: str  # trainable weights of PEFT methods
    autocast: str | None  # autocast dtype, None for no autocast
    lora_dropout: float = LORA_DROPOUT
    virtual_tokens: int = VIRTUAL_TOKENS

    @property
    def base_dtype(self):
        import torch

        return getattr(torch, self.base)

    @property
    def adapter_dtype(self):
        import torch

        return getattr(torch, self.adapter)

    @property
    def autocast_dtype(self):
        import torch

        return getattr(torch, self.autocast) if self.autocast else None


def resolve_policy(method: str, precision: str) -> Policy:
    if precision == "fp32":
        base, adapter, autocast = "float32", "float32", None
    else:
        half = "bfloat16" if precision.startswith("bf16") else "float16"
        if precision.endswith("-true"):
            base, adapter, autocast = half, half, None
        else:
            base, adapter, autocast = (half if method != "full" else "float32"), "float32", half
    if method == "qlora":
        adapter = QLORA_ADAPTER_DTYPE
    return Policy(base, adapter, autocast)


def set_adapter_dtype(model, policy: Policy) -> None:
    """Trainable weights in the policy's adapter dtype, as trl leaves them (DoRA magnitudes stay fp32:
    their updates are below bf16's resolution, trl#7268). Called on the model by trainer and estimator."""
    dtype = policy.adapter_dtype
    for name, p in model.named_parameters():
        if p.requires_grad and p.dtype != dtype and "lora_magnitude_vector" not in name:
            p.data = p.data.to(dtype)
