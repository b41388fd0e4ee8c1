"""Model loading and the fine-tuning method: full weights, or a peft adapter over a (4-bit) frozen base.

peft and bitsandbytes do the work; this module picks their settings from the config and the device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.train.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Precision:
    """What the Trainer is told (bf16/fp16 autocast) and the dtype frozen weights are loaded in."""

    device: str  # "cpu" | "cuda"
    bf16: bool
    fp16: bool

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp16" if self.fp16 else "fp32"


def resolve_precision(cfg: TrainConfig) -> Precision:
    """bf16 where the GPU supports it, else fp16 with loss scaling; fp32 on CPU unless asked."""
    import torch

    cuda = torch.cuda.is_available() and cfg.device != "cpu"
    if cfg.device == "cuda" and not cuda:
        raise BadInput("device: cuda was asked for but no CUDA GPU is visible; use device: auto or cpu")
    if not cuda:
        if cfg.fp16:
            raise BadInput("fp16: true needs a CUDA GPU; on CPU use bf16: true or leave both unset (fp32)")
        return Precision("cpu", bool(cfg.bf16), False)
    bf16_ok = torch.cuda.is_bf16_supported()
    if cfg.bf16 and not bf16_ok:
        raise BadInput("bf16: true but this GPU has no bf16 support; set fp16: true (or leave both unset)")
    if cfg.bf16 is None and cfg.fp16 is None:
        return Precision("cuda", bf16_ok, not bf16_ok)
    return Precision("cuda", bool(cfg.bf16), bool(cfg.fp16))


def _weights_dtype(cfg: TrainConfig, prec: Precision):
    """Full fine-tuning keeps fp32 master weights (autocast computes in half); frozen bases load in half."""
    import torch

    if cfg.method == "full" or prec.name == "fp32":
        return torch.float32
    return torch.bfloat16 if prec.bf16 else torch.float16


def load_model(cfg: TrainConfig, prec: Precision):
    """The base model (safetensors only, no remote code), quantised to NF4 for QLoRA."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": _weights_dtype(cfg, prec), "use_safetensors": True}
    if cfg.method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16 if prec.bf16 else torch.float16 if prec.fp16 else torch.float32,
        )
        kwargs["dtype"] = kwargs["quantization_config"].bnb_4bit_compute_dtype
        if prec.device == "cuda":
            kwargs["device_map"] = {"": 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(cfg.base_model, **kwargs)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BadInput(f"cannot load model '{cfg.base_model}': {first}") from None
    if cfg.method == "qlora":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
        disable_avx512bf16(model)
    return model


def disable_avx512bf16(model) -> int:
    """Turn off bitsandbytes' AVX512-BF16 CPU path on every 4-bit layer.

    On CPUs with AVX512-BF16, a no-grad forward (eval, generate) switches Linear4bit to a path that
    no longer passes gradients, so LoRA stops learning after the first eval with only a warning.
    """
    import bitsandbytes as bnb

    n = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
            n += 1
    return n


def target_modules(cfg: TrainConfig, model) -> list[str] | str:
    """Explicit `lora_target_modules` win; otherwise the estimator's preset (qv, attention, mlp, all-linear)."""
    if cfg.lora_target_modules:
        mods = cfg.lora_target_modules
        return [mods] if isinstance(mods, str) and mods != "all-linear" else mods
    from cheaptune.estimate.targets import resolve_targets

    try:
        return list(resolve_targets(model.config, cfg.lora_targets))
    except BadInput:
        raise
    except (KeyError, ValueError) as err:
        raise BadInput(f"lora_targets '{cfg.lora_targets}': {err}") from None


def peft_config(cfg: TrainConfig, model):
    """The peft config for the method, or None for full fine-tuning."""
    import peft

    common = {"task_type": peft.TaskType.CAUSAL_LM}
    if cfg.method == "full":
        return None
    if cfg.method in ("lora", "qlora", "dora"):
        return peft.LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=target_modules(cfg, model),
            use_dora=cfg.method == "dora",
            bias="none",
            **common,
        )
    if cfg.method == "ia3":
        # peft knows the (attention, feed-forward) pairs per architecture; its defaults are the paper's.
        return peft.IA3Config(**common)
    if cfg.method == "prompt_tuning":
        return peft.PromptTuningConfig(num_virtual_tokens=cfg.num_virtual_tokens, **common)
    return peft.PrefixTuningConfig(num_virtual_tokens=cfg.num_virtual_tokens, **common)


def build_model(cfg: TrainConfig, prec: Precision):
    """Load the base and wrap it for the method; returns the model the trainer trains."""
    model = load_model(cfg, prec)
    pcfg = peft_config(cfg, model)
    if pcfg is None:
        return model
    import peft

    wrapped = peft.get_peft_model(model, pcfg)
    trainable, total = wrapped.get_nb_trainable_parameters()
    log.info("method %s: %d trainable of %d parameters", cfg.method, trainable, total)
    return wrapped
