"""Turn a plan file (cheaptune.plan.planfile) into config fields: how to train and what it costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _precision(value: str) -> dict[str, Any]:
    """A policy precision name passes through; older spellings (bf16, fp16, 32) map to the HF flags."""
    from cheaptune.estimate.policy import PRECISIONS

    v = value.lower()
    if v in PRECISIONS:
        return {"precision": v}
    if v.startswith("bf16"):
        return {"bf16": True, "fp16": False}
    if v.startswith("fp16") or v.startswith("16"):
        return {"bf16": False, "fp16": True}
    return {"bf16": False, "fp16": False}


def _optimizer(name: str) -> str:
    """The planner's optimizer names (estimate policy's) -> HF `optim`; HF names pass through."""
    from cheaptune.estimate.policy import hf_optim

    try:
        return hf_optim(name)
    except KeyError:
        return name


def from_plan(path: str | Path, current: dict[str, Any]) -> dict[str, Any]:
    """Config fields from a plan; the model and dataset only fill gaps the config file left."""
    from cheaptune.plan.planfile import load

    plan = load(path)
    t = plan.train
    out: dict[str, Any] = {
        "method": t.method,
        "micro_batch_size": t.micro_batch,
        "gradient_accumulation_steps": t.grad_accum,
        "gradient_checkpointing": t.grad_ckpt,
        "sequence_len": t.seq_len,
        "num_epochs": t.epochs,
        "optimizer": _optimizer(t.optimizer),
        "price_per_hour": plan.offer.price_per_hour,
        "gpu_count": plan.offer.gpu_count,
        "billing_unit_s": plan.offer.billing_unit_s,
        "min_billed_s": plan.offer.min_billed_s,
        "predicted_cost_usd": plan.prediction.cost.total,
        "predicted_peak_bytes": plan.prediction.peak_vram_bytes,
        "predicted_tokens_per_s": plan.prediction.tokens_per_s,
        **_precision(t.precision),
    }
    if t.lora_r is not None:
        out["lora_r"] = t.lora_r
    if t.lora_alpha is not None:
        out["lora_alpha"] = t.lora_alpha
    if t.lora_targets is not None:
        out["lora_targets"] = t.lora_targets
    if t.checkpoint_minutes is not None:
        out["save_minutes"] = t.checkpoint_minutes
    if plan.budget_usd is not None:
        out["budget_usd"] = plan.budget_usd
    if not current.get("base_model"):
        out["base_model"] = plan.model
    if not current.get("datasets") and plan.dataset:
        out["datasets"] = [{"path": plan.dataset, "type": "auto"}]
    return out
