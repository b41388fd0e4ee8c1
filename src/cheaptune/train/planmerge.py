"""Turn a plan file (cheaptune.plan.planfile) into config fields: how to train (every setting the plan was
sized with, unchanged: train.settings.config_fields) and what it costs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.estimate.rl_settings import RLSettings

# Config fields that are training settings (train.settings.config_fields): a config that changes one of
# these trains something other than what the plan sized, so train warns and re-estimates (train.plancheck).
SETTING_KEYS = ("method", "precision", "quant", "optimizer", "micro_batch_size", "gradient_accumulation_steps",
                "gradient_checkpointing", "attn", "sequence_len", "num_epochs", "lora_r", "lora_alpha",
                "lora_targets", "lora_modules_to_save", "save_minutes", "liger_kernel", "torch_compile", "objective",
                "precompute_ref_log_probs", *RLSettings.model_fields)


def run_budget(plan_budget: float | None, config_budget: Any = None, flag: float | None = None) -> Any:
    """The budget cap a run from a plan runs under, one rule for `train --plan` and `launch` (README "A typical
    session"): a --budget flag is the user's word for this run and wins (it is how a run stopped at its cap is
    raised); else the lower of the plan's budget_usd and the config file's, since a cap only ever tightens and
    neither file may lift the other's. A config value that is not a finite number is returned as given, for the
    config's validation to refuse in one line (a NaN would otherwise drop out of min())."""
    if flag is not None:
        return flag
    if config_budget is None:
        return plan_budget
    if not is_amount(config_budget) or plan_budget is None:
        return config_budget
    return min(plan_budget, config_budget)


def is_amount(value: Any) -> bool:
    """A finite number of dollars as YAML gives it: not a bool (`true` is no cap), not NaN or inf."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def from_plan(path: str | Path, current: dict[str, Any], gpus: int | None = None) -> tuple[dict[str, Any], str | None]:
    """Config fields from a plan; the model and dataset only fill gaps the config file left. Run on `gpus`
    GPUs other than the plan's, the accumulation keeps the planned effective batch (`keep_batch`); the
    second value is the line that says so (None when nothing changed)."""
    from cheaptune.plan.planfile import load
    from cheaptune.train.settings import config_fields

    plan = load(path)
    if plan.train.loss != "trl":
        raise BadInput(f"plan file {path} was sized for loss {plan.train.loss!r}; cheaptune train runs trl's chunked "
                       "loss: make the plan again without --loss/--trainer")
    out: dict[str, Any] = {
        **config_fields(plan.train),
        "price_per_hour": plan.offer.price_per_hour,
        "gpu_count": plan.offer.gpu_count,
        "billing_unit_s": plan.offer.billing_unit_s,
        "min_billed_s": plan.offer.min_billed_s,
        "predicted_cost_usd": plan.prediction.cost.total,
        "predicted_peak_bytes": plan.prediction.peak_vram_bytes,
        "predicted_tokens_per_s": plan.prediction.tokens_per_s,
        "predicted_gpu": plan.offer.gpu,
    }
    if plan.budget_usd is not None:
        out["budget_usd"] = plan.budget_usd
    if not current.get("base_model"):
        out["base_model"] = plan.model
    if not current.get("datasets") and plan.dataset:
        out["datasets"] = [{"path": plan.dataset, "type": "auto"}]
    note = None
    if gpus is not None and gpus != plan.train.gpus and "gradient_accumulation_steps" not in current:
        out["gradient_accumulation_steps"], note = keep_batch(plan.train.micro_batch, plan.train.grad_accum,
                                                              plan.train.gpus, gpus)
    return out, note


def keep_batch(micro: int, accum: int, planned_gpus: int, gpus: int) -> tuple[int, str]:
    """The accumulation that keeps micro x accum x GPUs at what the plan sized on `gpus` GPUs (the nearest
    when it does not divide), and one line saying so: fewer GPUs must not silently shrink the batch."""
    want = micro * accum * planned_gpus
    new = max(1, round(accum * planned_gpus / gpus))
    got = micro * new * gpus
    said = f"plan sized for {planned_gpus} GPU(s), running on {gpus}: gradient accumulation {accum} -> {new}"
    if got == want:
        return new, f"{said} keeps the effective batch at {micro} x {new} x {gpus} = {got}"
    return new, f"{said}, the nearest to the plan's effective batch {want} (now {micro} x {new} x {gpus} = {got})"
