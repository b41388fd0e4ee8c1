"""The one set of training settings: what the planner estimates, the plan file stores, `train --plan`
runs and `launch` forwards.

Every field is resolved (no "default per method" left open), so a reader never re-derives a setting:
the precision is the one the fit used for that GPU, the quantization the one simulated. `request()`
turns the settings into the estimator's request, so anyone can re-estimate a plan byte for byte.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cheaptune.estimate import policy
from cheaptune.estimate.rl_settings import RLSettings

# The memory simulation runs min(grad_accum, policy.HELD_MICRO_STEPS) micro-steps (estimate/memory/simulate.py
# _run_steps). Measured on SmolLM2-135M (seq 512, micro-batch 1): full +256.6 MiB device total (the bf16
# gradient of each of its 134.5M weights), LoRA r16 +18.6 MiB (its 4.9M fp32 adapter gradients); on Llama-2-7B
# (seq 1024, micro-batch 4) LoRA +167 MiB, QLoRA +93 MiB: above the caching allocator's 20 MiB segment, so
# adapters are simulated with their accumulation too.
SHARDINGS = ("ddp", "zero2", "zero3", "fsdp", "fsdp+offload", "zero2+offload", "zero3+offload")
LORA_METHODS = ("lora", "qlora", "dora")
# The policy's names are the allowed values, so the estimator, the plan file and the trainer share one list.
_CHOICES = {"method": policy.METHODS, "precision": policy.PRECISIONS, "quant": policy.QUANTS,
            "optimizer": policy.OPTIMIZERS, "attn": policy.ATTNS, "loss": policy.LOSSES, "sharding": SHARDINGS,
            "objective": (*policy.OBJECTIVES, "grpo")}  # grpo: estimated by estimate.memory.grpo_memory/time.grpo_time


class TrainSettings(BaseModel):
    """How to train, every setting resolved. Stored in full in the plan file's `train:` section."""

    model_config = ConfigDict(extra="forbid")

    method: str = Field(description="full | lora | qlora | dora | ia3 | prompt_tuning | prefix_tuning")
    precision: str = Field(description="bf16-true | bf16-mixed | fp16-mixed | fp32 (estimate.policy)")
    quant: str | None = Field(None, description="qlora only: nf4, or nf4-dq (double quantization)")
    optimizer: str = "adamw"
    lora_r: int | None = Field(16, ge=1)
    lora_alpha: int | None = Field(32, ge=1)
    lora_targets: str | None = "all-linear"
    lora_dropout: float | None = Field(policy.LORA_DROPOUT, ge=0.0, lt=1.0,
                                       description="LoRA dropout: > 0 keeps a dropped copy of each adapted input")
    train_modules: str | None = Field(None, description="modules trained whole beside the adapter (peft "
                                      "modules_to_save), e.g. embed_tokens,lm_head")
    micro_batch: int = Field(1, ge=1, le=4096)
    grad_accum: int = Field(1, ge=1, le=1_000_000)
    grad_ckpt: bool = False
    attn: str = "sdpa"
    liger_kernel: bool = Field(False, description="Liger's RMSNorm/RoPE/SwiGLU kernels (CUDA; extra liger)")
    torch_compile: bool = Field(False, description="torch.compile the model (CUDA; extra compile)")
    loss: str = Field("trl", description="trl: chunked LM head (cheaptune train); hf: full logits")
    objective: str = Field("sft", description="sft | dpo | orpo (trl's trainer for it)")
    precompute_ref: bool = Field(False, description="dpo: reference log-probs computed before training")
    rl: RLSettings | None = Field(None, description="grpo only: rollouts and reference (estimate.rl_settings)")
    seq_len: int = Field(2048, ge=8, le=1_048_576)
    epochs: float = Field(1.0, gt=0, le=10_000)
    gpus: int = Field(1, ge=1, le=4096, description="GPUs in the whole job (all nodes)")
    sharding: str | None = Field(None, description="ddp | zero2 | zero3 | fsdp (+offload) with several GPUs")
    checkpoint_minutes: float | None = Field(None, gt=0, description="Young/Daly interval for spot; None on demand")

    @field_validator(*_CHOICES)
    @classmethod
    def _one_of(cls, value: str | None, info) -> str | None:
        allowed = _CHOICES[info.field_name]
        if info.field_name == "quant" and value == "int8":
            raise ValueError(policy.INT8_REFUSAL)
        if value is not None and value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrainSettings:
        if self.method == "qlora" and self.quant is None:
            self.quant = policy.DEFAULT_QUANT["qlora"]
        if self.method != "qlora" and self.quant is not None:
            raise ValueError(f"quant {self.quant} needs method qlora (it quantizes the frozen base)")
        if self.method not in LORA_METHODS:
            self.lora_r = self.lora_alpha = self.lora_targets = self.lora_dropout = self.train_modules = None
        elif self.lora_r is None or self.lora_alpha is None:
            raise ValueError(f"method {self.method} needs lora_r and lora_alpha")
        elif self.lora_dropout is None:
            self.lora_dropout = policy.LORA_DROPOUT
        if self.objective != "dpo":
            self.precompute_ref = False  # only DPO has a reference to precompute
        self.rl = (self.rl or RLSettings()) if self.objective == "grpo" else None
        if self.gpus > 1 and self.sharding is None:
            self.sharding = "ddp"
        if self.gpus == 1:
            self.sharding = None
        return self

    @property
    def offload(self) -> bool:
        return bool(self.sharding and self.sharding.endswith("+offload"))

    @property
    def sharding_name(self) -> str | None:
        """The sharding without the offload suffix (the estimator's `sharding`)."""
        return self.sharding.split("+")[0] if self.sharding else None

    @property
    def speedup(self):
        """The time model's factor for the speed options on (estimate.time.speedups), with sources."""
        from cheaptune.estimate.time.speedups import speedup

        return speedup(self.liger_kernel, self.torch_compile, self.optimizer)

    def request(self, model: Any):
        """The estimator's request for these settings (model: catalog id, hub id, folder or config dict)."""
        from cheaptune.estimate.memory.memory import EstimateRequest

        return EstimateRequest(
            model=model, method=self.method, lora_r=self.lora_r or 16, lora_alpha=self.lora_alpha or 32,
            lora_targets=self.lora_targets or "all-linear", lora_dropout=self.lora_dropout, micro_batch=self.micro_batch, seq_len=self.seq_len,
            precision=self.precision, quant=self.quant, grad_ckpt=self.grad_ckpt, optimizer=self.optimizer,
            attn=self.attn, loss=self.loss, gpus=self.gpus, sharding=self.sharding_name, offload=self.offload,
            allow_long_context=True, precompute_ref=self.precompute_ref, grad_accum=min(self.grad_accum, policy.HELD_MICRO_STEPS),
            objective="sft" if self.objective == "grpo" else self.objective,  # GRPO's policy step: rl.grpo_setup
            train_modules=self.train_modules,
        )


def for_gpu(method: str, gpu_bf16: bool, **fields: Any) -> TrainSettings:
    """Settings for `method` on a GPU with or without bf16: the policy's precision for that board."""
    fields.setdefault("precision", policy.training_precision(method, gpu_bf16))
    return TrainSettings(method=method, **fields)
