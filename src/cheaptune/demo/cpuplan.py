"""A plan file for the CPU the demo runs on, so the demo trains the way a user does: `train --plan`.

The catalog has no CPU board, so the planner cannot price one; the demo measures this CPU (demo.predict),
times its own run with the step-time model and writes what `cheaptune plan --save` would: the settings
the run trains with, an offer on this machine (already paid for: $0/h, which `launch` refuses) and the
prediction `train`'s probe holds the run against. The run's config keeps only what is not a plan setting
(learning rate, steps, sample prompts), so the plan's settings are the ones that train.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cheaptune.plan import planfile

PRECISION = "fp32"  # what train runs on a CPU unless asked (train.methods.resolve_precision)


def cpu_plan(cfg: Any, model: str, dataset: str | None, prediction: Any) -> planfile.PlanFile:
    """The PlanFile for TrainConfig `cfg` on this CPU, `prediction` a demo.predict.Prediction of its steps.

    Memory is the estimator's simulated peak (host memory has no CUDA context or allocator pool) against
    this machine's RAM."""
    import psutil

    import cheaptune
    from cheaptune.estimate.memory.memory import estimate_memory
    from cheaptune.train.settings import from_config

    settings = from_config(cfg, PRECISION)
    peak = estimate_memory(settings.request(model)).peak_allocated_bytes
    free = planfile.CostBreakdown(compute=0.0, total=0.0)
    return planfile.PlanFile(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), cheaptune_version=cheaptune.__version__,
        model=model, dataset=dataset, train=settings,
        offer=planfile.Offer(provider="local", gpu=planfile.CPU_BOARD, price_per_hour=0.0, min_billed_s=0),
        prediction=planfile.Prediction(peak_vram_bytes=peak, gpu_memory_bytes=psutil.virtual_memory().total,
                                       tokens=prediction.tokens, tokens_per_s=prediction.tokens_per_s,
                                       hours=prediction.seconds / 3600, cost=free),
    )


def run_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The config file's keys that are not plan settings (its aliases included): what train adds to the plan."""
    from cheaptune.train.config import canonical_name
    from cheaptune.train.planmerge import SETTING_KEYS

    drop = {*SETTING_KEYS, "lora_target_modules", "lora_target_linear", "lora_dropout", "adapter"}
    return {k: v for k, v in raw.items() if canonical_name(k) not in drop}


def write(plan: planfile.PlanFile, raw: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """(plan file, run config) beside the run folder `out`, written atomically."""
    import yaml

    from cheaptune.util import atomic

    out.parent.mkdir(parents=True, exist_ok=True)
    plan_path, config_path = out.parent / f"{out.name}-plan.yaml", out.parent / f"{out.name}-config.yaml"
    planfile.save(plan, plan_path)
    atomic.write_text(config_path, yaml.safe_dump(run_config(raw), sort_keys=False))
    return plan_path, config_path
