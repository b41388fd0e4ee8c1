"""Model loading and the fine-tuning method: full weights, or a peft adapter over a (4-bit) frozen base.

peft and bitsandbytes do the work; dtypes come from cheaptune.estimate.policy (the table the memory
estimate simulates), the rest from the config and the device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import (
    NO_BF16_PRECISION,
    Policy,
    resolve_policy,
    set_adapter_dtype,
    training_precision,
)
from cheaptune.train.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Precision:
    """A precision policy name (cheaptune.estimate.policy) on a device; dtypes come from the policy."""

    device: str  # "cpu" | "cuda"
    name: str  # bf16-true | bf16-mixed | fp16-mixed | fp32

    def policy(self, method: str) -> Policy:
        return resolve_policy(method, self.name)

    @property
    def bf16(self) -> bool:
        """Trainer's bf16 flag: autocast, so on for bf16-mixed only (bf16-true has no autocast)."""
        return self.name == "bf16-mixed"

    @property
    def fp16(self) -> bool:
        return self.name == "fp16-mixed"


def asked_precision(cfg: TrainConfig) -> str | None:
    """The precision the user asked for: `precision`, else the HF flags (bf16/fp16 true = autocast)."""
    if cfg.precision:
        return cfg.precision
    if cfg.bf16:
        return "bf16-mixed"
    if cfg.fp16:
        return "fp16-mixed"
    return "fp32" if cfg.bf16 is False and cfg.fp16 is False else None


def resolve_precision(cfg: TrainConfig) -> Precision:
    """The policy's default for the method on a GPU (fp16-mixed without bf16); fp32 on CPU unless asked."""
    import torch

    cuda = torch.cuda.is_available() and cfg.device != "cpu"
    if cfg.device == "cuda" and not cuda:
        raise BadInput("device: cuda was asked for but no CUDA GPU is visible; use device: auto or cpu")
    asked = asked_precision(cfg)
    if not cuda:
        if asked and asked.startswith("fp16"):
            raise BadInput("fp16 needs a CUDA GPU; on CPU use precision: bf16-mixed or bf16-true, or leave it unset (fp32)")
        return Precision("cpu", asked or "fp32")
    bf16_ok = torch.cuda.is_bf16_supported()
    if asked and asked.startswith("bf16") and not bf16_ok:
        raise BadInput(f"precision {asked}: this GPU has no bf16 support; use precision: {NO_BF16_PRECISION}")
    return Precision("cuda", asked or training_precision(cfg.method, bf16_ok))


ATTN_IMPLEMENTATION = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}


def attn_implementation(attn: str, device: str) -> str:
    """transformers' attn_implementation for our attention name; flash needs CUDA and the flash-attn package."""
    if attn == "flash":
        import importlib.util

        if device != "cuda":
            raise BadInput("attn: flash needs a CUDA GPU; use attn: sdpa on this machine")
        if importlib.util.find_spec("flash_attn") is None:
            raise BadInput("attn: flash needs the flash-attn package (pip install flash-attn); or use attn: sdpa")
    return ATTN_IMPLEMENTATION[attn]


def load_model(cfg: TrainConfig, prec: Precision):
    """The base model (safetensors only, no remote code) in the policy's dtype, NF4-quantised for QLoRA.

    No peft prepare_model_for_kbit_training: its fp32 upcast of embeddings, norms and head is memory
    the policy does not spend (trl does not call it either); peft freezes the base, trl enables input
    grads for gradient checkpointing.
    """
    from cheaptune.train import speedups

    speedups.check(cfg, prec.device)  # before any heavy import: an impossible option costs no load time
    from transformers import AutoModelForCausalLM

    policy = prec.policy(cfg.method)
    kwargs: dict[str, Any] = {"dtype": policy.base_dtype, "use_safetensors": True,
                              "attn_implementation": attn_implementation(cfg.attn, prec.device)}
    if cfg.method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=cfg.quant == "nf4-dq",
            bnb_4bit_compute_dtype=policy.base_dtype,
        )
        if prec.device == "cuda":
            kwargs["device_map"] = {"": 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(cfg.base_model, **kwargs)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BadInput(f"cannot load model '{cfg.base_model}': {first}") from None
    if cfg.method == "qlora":
        from cheaptune.estimate.memory.build import check_quantized

        check_quantized(model, model.config.model_type)
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
    from cheaptune.estimate.memory.targets import resolve_targets

    try:
        return list(resolve_targets(model.config, cfg.lora_targets))
    except BadInput:
        raise
    except (KeyError, ValueError) as err:
        raise BadInput(f"lora_targets '{cfg.lora_targets}': {err}") from None


def modules_to_save(cfg: TrainConfig, model) -> list[str] | None:
    """The modules trained whole beside the adapter, resolved on the model as the estimator resolves them
    (embed_tokens and lm_head: this model's input embedding and head, whatever it names them)."""
    from cheaptune.estimate.memory.targets import resolve_train_modules
    from cheaptune.train.settings import train_modules

    names = train_modules(cfg)
    return resolve_train_modules(model, names) if names else None


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
            modules_to_save=modules_to_save(cfg, model),
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

    policy = prec.policy(cfg.method)
    try:
        wrapped = peft.get_peft_model(model, pcfg, autocast_adapter_dtype=policy.adapter == "float32")
    except peft.utils.NoMatchingPeftModuleError as err:  # e.g. lora_target_modules naming no module
        raise BadInput(f"lora_target_modules {cfg.lora_target_modules!r}: {err}") from None
    set_adapter_dtype(wrapped, policy)
    trainable, total = wrapped.get_nb_trainable_parameters()
    log.info("method %s: %d trainable of %d parameters", cfg.method, trainable, total)
    return wrapped
