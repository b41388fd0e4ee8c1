"""The training defaults the estimate assumes, in one table the trainer follows too.

Precision names: `bf16-true` keeps every tensor (base weights, adapters, grads, optimizer state) in
bf16 with no autocast; `bf16-mixed` / `fp16-mixed` keep trainable weights in fp32 (master copy) and
run under autocast, while frozen base weights stay 16-bit (nothing to update, so no master copy);
`fp32` is fp32 throughout.

Defaults, chosen for the cheapest run that still trains well, and matching what trl's SFTTrainer does:
- full: bf16-true (8 B/param with AdamW instead of 16-18; torchtune's and LLaMA-Factory pure_bf16 default).
- lora, dora, ia3, prompt/prefix tuning: bf16-mixed (bf16 base, fp32 adapters: peft's
  autocast_adapter_dtype=True default, with Trainer bf16=True autocast).
- qlora: bf16-true (NF4 base, bf16 compute; trl casts QLoRA adapters to bf16 except DoRA magnitudes).
Other trainer settings the estimate assumes: optimizer adamw = torch AdamW fused (Trainer's
adamw_torch_fused), lora_dropout 0.0 (peft default; >0 stores an input copy per adapted module),
20 virtual tokens for prompt/prefix tuning, use_cache=False, gradient checkpointing non-reentrant,
no padding (packing / padding-free: attention_mask None), HF's own causal-LM loss.
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("full", "lora", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning")
PRECISIONS = ("bf16-true", "bf16-mixed", "fp16-mixed", "fp32")
QUANTS = ("nf4", "nf4-dq", "int8")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor")
ATTNS = ("sdpa", "flash", "eager")

DEFAULT_PRECISION: dict[str, str] = {
    "full": "bf16-true",
    "lora": "bf16-mixed",
    "qlora": "bf16-true",
    "dora": "bf16-mixed",
    "ia3": "bf16-mixed",
    "prompt_tuning": "bf16-mixed",
    "prefix_tuning": "bf16-mixed",
}
DEFAULT_QUANT = {"qlora": "nf4-dq"}
LORA_DROPOUT = 0.0
VIRTUAL_TOKENS = 20
# Trainer `optim` names for our optimizer choices (transformers OptimizerNames).
HF_OPTIM = {
    "adamw": "adamw_torch_fused",
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "sgd": "sgd",
    "adafactor": "adafactor",
}


@dataclass(frozen=True)
class Policy:
    """Resolved dtypes (torch dtype names) for one request."""

    base: str  # frozen / all weights
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
        return Policy("float32", "float32", None)
    half = "bfloat16" if precision.startswith("bf16") else "float16"
    if precision.endswith("-true"):
        return Policy(half, half, None)
    base = half if method != "full" else "float32"
    return Policy(base, "float32", half)
