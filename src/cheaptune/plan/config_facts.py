"""Facts for the doctor from a training config (Axolotl keys, read by cheaptune.train.config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.doctor import Facts


def load_config(path: str | Path) -> Any:
    """The validated TrainConfig (the trainer's own loader and pre-load checks, so doctor refuses what train
    refuses of the file alone)."""
    from cheaptune.train import config as train_config

    cfg = train_config.validate(train_config.read_yaml(path), where=str(path))
    # a budget's price may come from a plan or --price-per-hour when it trains, so a config without one is checked as priced
    priced = cfg if cfg.price_per_hour is not None else cfg.model_copy(update={"price_per_hour": 0.0})
    try:
        train_config.check_before_load(priced)
    except BadInput as err:  # named like a validation error: "<config>: <what is wrong>"
        raise BadInput(f"{path}: {err}") from None
    return cfg


def _context(base_model: str | None) -> tuple[Any, int | None]:
    if not base_model:
        return None, None
    try:
        from cheaptune.catalog.models import resolve_model

        spec = resolve_model(base_model)
    except BadInput:
        return None, None
    ctx = spec.config.get("max_position_embeddings") or spec.config.get("n_positions")
    return spec, int(ctx) if ctx else None


def facts_from_config(cfg: Any, gpu: Any = None, spot: bool | None = None, fit: Any = None) -> Facts:
    """Map config keys onto Facts. `gpu` (a GpuSpec) and `fit` (a FitFn) enable the memory checks."""
    spec, context = _context(cfg.base_model)
    precision = getattr(cfg, "precision", None) or ("fp16" if cfg.fp16 else ("bf16" if cfg.bf16 else None))
    on_spot = spot if spot is not None else cfg.spot_notice != "none"
    facts = Facts(
        method=cfg.method, seq_len=cfg.sequence_len, context_length=context, packing=cfg.sample_packing,
        dataloader_workers=cfg.dataloader_num_workers, budget_usd=cfg.budget_usd, spot=on_spot,
        checkpoint_minutes=cfg.save_minutes if cfg.save_minutes else (0.0 if cfg.save_steps else None),
        precision=precision, per_second_billing=cfg.billing_unit_s <= 1,
    )
    if gpu is not None:
        facts.gpu_name, facts.gpu_bf16, facts.gpu_memory_bytes = gpu.name, gpu.bf16, gpu.memory_bytes
        facts.peak_bytes = own_peak(cfg, gpu) or cfg.predicted_peak_bytes
        lora = _try_fit(fit, gpu) if cfg.method in ("full", "qlora") else None
        if lora is not None:
            if lora.fits and cfg.method == "full":
                facts.peft_alternative = f"LoRA on the same {gpu.name}"
            if lora.fits and cfg.method == "qlora":
                facts.lora_same_gpu = f"micro-batch {lora.micro_batch}"
    return facts


def run_precision(cfg: Any, gpu: Any) -> str:
    """The precision the config trains at on this GPU: what it asks for, else the policy's for the board."""
    from cheaptune.estimate.policy import training_precision
    from cheaptune.train.methods import asked_precision

    return asked_precision(cfg) or training_precision(cfg.method, bool(gpu.bf16))


def own_peak(cfg: Any, gpu: Any) -> int | None:
    """The estimated device total of the config's own settings on one `gpu`; None when it cannot be
    estimated (no model, an unknown model or optimizer: the other checks still run)."""
    if not cfg.base_model:
        return None
    from cheaptune.estimate.memory.memory import estimate_memory
    from cheaptune.train.settings import from_config

    try:
        settings = from_config(cfg, run_precision(cfg, gpu))
        return estimate_memory(settings.request(cfg.base_model)).device_total_bytes
    except (BadInput, ValueError):
        return None


def _try_fit(fit: Any, gpu: Any) -> Any:
    """LoRA's fit on this GPU, or None when it cannot be estimated (the other checks say why)."""
    if fit is None:
        return None
    from cheaptune.estimate.policy import training_precision

    try:
        return fit("lora", gpu.memory_bytes, training_precision("lora", bool(gpu.bf16)))
    except BadInput:
        return None
