"""The training settings (estimate.settings.TrainSettings) in and out of the trainer.

Three directions, one mapping each: a plan's settings into config fields (`config_fields`), a config
into settings for a given precision and GPU count (`from_config`, what doctor and the plan-override
check estimate), and the settings a built trainer actually runs, read back from the model, optimizer,
TrainingArguments and the accelerate config (`read_back`), so a test can prove plan and run agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cheaptune.estimate.policy import HF_OPTIM
from cheaptune.estimate.rl_settings import RLSettings
from cheaptune.estimate.settings import TrainSettings

# HF `optim` names -> ours; a few HF spellings of the same optimizer share one of our names.
# adamw_torch (the demo config's, HF's non-fused AdamW) keeps the same two fp32 moments as the fused one;
# adamw_torch_fused reads back as "adamw", cheaptune's default, which runs it ("adamw-fused" names the same kernel).
_OURS = {hf: ours for ours, hf in HF_OPTIM["cuda"].items()} | {"adamw_8bit": "adamw-8bit", "adamw_torch": "adamw",
                                                               "adamw_torch_fused": "adamw"}
SHARDING_OF = {"MULTI_GPU": "ddp", "FSDP": "fsdp", "MULTI_CPU": "ddp"}


def our_optimizer(hf_name: str | None) -> str | None:
    """Our optimizer name for an HF `optim` value (None: the default AdamW; unknown: None)."""
    return "adamw" if hf_name is None else _OURS.get(hf_name)


def config_fields(s: TrainSettings) -> dict[str, Any]:
    """TrainConfig fields that make the trainer run exactly these settings."""
    out: dict[str, Any] = {
        "method": s.method, "precision": s.precision, "quant": s.quant, "optimizer": HF_OPTIM["cuda"][s.optimizer],
        "micro_batch_size": s.micro_batch, "gradient_accumulation_steps": s.grad_accum,
        "gradient_checkpointing": s.grad_ckpt, "attn": s.attn, "sequence_len": s.seq_len, "num_epochs": s.epochs,
        "liger_kernel": s.liger_kernel, "torch_compile": s.torch_compile, "objective": s.objective,
        "precompute_ref_log_probs": s.precompute_ref,
    }
    if s.lora_r is not None:
        out.update(lora_r=s.lora_r, lora_alpha=s.lora_alpha, lora_targets=s.lora_targets, lora_dropout=s.lora_dropout)
        if s.train_modules:
            out["lora_modules_to_save"] = s.train_modules.split(",")
    if s.checkpoint_minutes is not None:
        out["save_minutes"] = s.checkpoint_minutes
    if s.rl is not None:
        out.update(s.rl.model_dump())  # the GRPO keys of the config, by the same names
    return out


def train_modules(cfg: Any) -> str | None:
    """A config's lora_modules_to_save as the estimator's --train-modules names (None when unset)."""
    mods = cfg.lora_modules_to_save
    return (mods if isinstance(mods, str) else ",".join(mods)) if mods else None


def _targets(cfg: Any) -> str:
    mods = cfg.lora_target_modules
    if mods and mods != "all-linear":
        return mods if isinstance(mods, str) else ",".join(mods)
    return cfg.lora_targets


def from_config(cfg: Any, precision: str, gpus: int = 1, sharding: str | None = None) -> TrainSettings:
    """The settings a TrainConfig trains with at `precision` on `gpus` GPUs (raises ValueError for an
    optimizer the estimator does not know)."""
    optimizer = our_optimizer(cfg.optimizer)
    if optimizer is None:
        raise ValueError(f"optimizer {cfg.optimizer!r} cannot be estimated; use one of {', '.join(_OURS)}")
    lora = cfg.method in ("lora", "qlora", "dora")
    return TrainSettings(
        method=cfg.method, precision=precision, quant=cfg.quant if cfg.method == "qlora" else None,
        optimizer=optimizer, lora_r=cfg.lora_r if lora else None, lora_alpha=cfg.lora_alpha if lora else None,
        lora_targets=_targets(cfg) if lora else None, lora_dropout=cfg.lora_dropout if lora else None,
        train_modules=train_modules(cfg) if lora else None, micro_batch=cfg.micro_batch_size,
        grad_accum=cfg.gradient_accumulation_steps, grad_ckpt=cfg.gradient_checkpointing, attn=cfg.attn,
        liger_kernel=cfg.liger_kernel, torch_compile=cfg.torch_compile,
        seq_len=cfg.sequence_len, epochs=cfg.num_epochs, gpus=gpus, sharding=sharding if gpus > 1 else None,
        objective=cfg.objective, precompute_ref=cfg.precompute_ref_log_probs,
        rl=RLSettings.from_config(cfg) if cfg.objective == "grpo" else None,
    )


def _method(model: Any) -> tuple[str, str | None, Any]:
    """(method, quant, peft config or None) from the built model."""
    peft_cfg = getattr(model, "peft_config", {}).get("default") if hasattr(model, "peft_config") else None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    q = getattr(base.config, "quantization_config", None)
    quant = None
    if q is not None:
        qd = q if isinstance(q, dict) else q.to_dict()
        if qd.get("load_in_4bit"):
            quant = "nf4-dq" if qd.get("bnb_4bit_use_double_quant") else "nf4"
    if peft_cfg is None:
        return "full", None, None
    kind = type(peft_cfg).__name__
    if kind == "LoraConfig":
        method = "dora" if peft_cfg.use_dora else ("qlora" if quant else "lora")
    else:
        method = {"IA3Config": "ia3", "PromptTuningConfig": "prompt_tuning",
                  "PrefixTuningConfig": "prefix_tuning"}[kind]
    return method, quant, peft_cfg


def _precision(model: Any, args: Any) -> str:
    if args.fp16:
        return "fp16-mixed"
    if args.bf16:
        return "bf16-mixed"
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    dtype = str(base.get_input_embeddings().weight.dtype).removeprefix("torch.")
    return {"bfloat16": "bf16-true", "float32": "fp32"}[dtype]


def _layout(output_dir: str | Path) -> tuple[int, str | None]:
    """(GPUs, sharding) from the accelerate config the launcher wrote; one GPU when there is none."""
    path = Path(output_dir) / "accelerate_config.yaml"
    if not path.is_file():
        return 1, None
    acc = yaml.safe_load(path.read_text())
    n = int(acc["num_processes"])
    if "deepspeed_config" in acc:
        ds = acc["deepspeed_config"]
        sharding = f"zero{ds['zero_stage']}" + ("+offload" if ds["offload_optimizer_device"] != "none" else "")
    else:
        sharding = SHARDING_OF[acc["distributed_type"]]
        if acc.get("fsdp_config", {}).get("fsdp_offload_params"):
            sharding += "+offload"
    return n, sharding if n > 1 else None


def read_back(trainer: Any) -> TrainSettings:
    """The settings a built trainer runs: from its model, optimizer, arguments and launch config."""
    args, model = trainer.args, trainer.model
    method, quant, peft_cfg = _method(model)
    lora = method in ("lora", "qlora", "dora")
    gpus, sharding = _layout(args.output_dir)
    from trl import DPOTrainer, GRPOTrainer, SFTTrainer
    from trl.experimental.orpo import ORPOTrainer

    objective = "dpo" if isinstance(trainer, DPOTrainer) else "orpo" if isinstance(trainer, ORPOTrainer) else "sft"
    grpo = isinstance(trainer, GRPOTrainer)
    objective = "grpo" if grpo else objective
    return TrainSettings(
        method=method, precision=_precision(model, args), quant=quant, optimizer=our_optimizer(args.optim),
        lora_r=peft_cfg.r if lora else None, lora_alpha=peft_cfg.lora_alpha if lora else None,
        lora_targets=",".join(sorted(peft_cfg.target_modules)) if lora else None,
        lora_dropout=peft_cfg.lora_dropout if lora else None,
        train_modules=",".join(sorted(peft_cfg.modules_to_save)) if lora and peft_cfg.modules_to_save else None,
        micro_batch=args.per_device_train_batch_size, grad_accum=args.gradient_accumulation_steps,
        grad_ckpt=bool(args.gradient_checkpointing), attn=model.config._attn_implementation,
        liger_kernel=bool(args.use_liger_kernel), torch_compile=bool(args.torch_compile),
        loss="trl" if isinstance(trainer, (SFTTrainer, DPOTrainer, ORPOTrainer, GRPOTrainer)) else "hf",
        seq_len=args.vllm_max_model_length if grpo else args.max_length,  # GRPO: prompt + completion window
        epochs=args.num_train_epochs, gpus=gpus, sharding=sharding, objective=objective,
        precompute_ref=bool(getattr(args, "precompute_ref_log_probs", False)),
        rl=RLSettings.from_args(args) if grpo else None,
    )
