"""A config or flag that changes a plan's setting trains something the plan did not size: say so, with
the new estimated peak, and refuse when it no longer fits the planned GPU (unless --force)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.train.planmerge import SETTING_KEYS

GIB = 1024**3
# Settings whose change moves the peak (epochs, alpha and the save interval do not; accumulation only where it
# crosses 1, `holds_gradients`).
MEMORY_KEYS = set(SETTING_KEYS) - {"num_epochs", "gradient_accumulation_steps", "lora_alpha", "save_minutes"}


def holds_gradients(accum: int) -> bool:
    """More than one micro-step per optimizer step holds every gradient into the next micro-step's forward
    (estimate.policy.HELD_MICRO_STEPS): 1 -> 4 moves the peak, 4 -> 8 does not."""
    return accum > 1


def _new_peak(cfg: Any, plan: Any) -> tuple[int | None, str]:
    """Device total for the config's own settings at the plan's GPU count; None with the reason when
    it cannot be estimated."""
    from cheaptune.estimate.memory.memory import estimate_memory
    from cheaptune.train.settings import from_config

    try:
        settings = from_config(cfg, cfg.precision or plan.train.precision, plan.train.gpus, plan.train.sharding)
        return estimate_memory(settings.request(cfg.base_model or plan.model)).device_total_bytes, ""
    except (BadInput, ValueError) as err:
        return None, str(err).splitlines()[0]


def _same_model(a: str, b: str) -> bool:
    """One model however it is spelled: a hub id in any case, a folder by relative or absolute path."""
    if a.strip().lower() == b.strip().lower():
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def check_plan_overrides(cfg: Any, plan_path: str | Path, force: bool = False, out=None) -> int | None:
    """Warn when the model is not the plan's, and about every plan setting the config file or a flag replaced
    (saying which); returns the re-estimated peak (None if nothing that changes memory was replaced).
    BadInput when the new peak exceeds the planned GPU's memory."""
    out = out or sys.stderr  # looked up now: a test or caller may have replaced sys.stderr since import
    from cheaptune.plan.planfile import load

    plan = load(plan_path)
    if cfg.base_model and not _same_model(cfg.base_model, plan.model):
        print(f"warning: model {cfg.base_model} is not plan {plan_path}'s {plan.model}: its peak memory, speed and "
              f"cost were sized for {plan.model}; make a plan for this model (cheaptune plan {cfg.base_model} ...)",
              file=out)
    changed = getattr(cfg, "_plan_overrides", {})
    # a flag, the config or another GPU count (planmerge.keep_batch) can make the run hold gradients the plan did not
    held = holds_gradients(cfg.gradient_accumulation_steps) != holds_gradients(plan.train.grad_accum)
    if not changed and not held:
        return None
    if changed:
        origins = getattr(cfg, "_plan_override_origins", {})
        listed = ", ".join(f"{k} {a} -> {b}" + (f" ({origins[k]})" if k in origins else "")
                           for k, (a, b) in changed.items())
        print(f"warning: these settings replace plan {plan_path}'s: {listed}", file=out)
    if not MEMORY_KEYS & set(changed) and not held:
        return None
    peak, why = _new_peak(cfg, plan)
    gpu, mem = plan.offer.gpu, plan.prediction.gpu_memory_bytes
    if peak is None:
        print(f"warning: cannot re-estimate the peak for the new settings ({why}); the plan's "
              f"{plan.prediction.peak_vram_bytes / GIB:.1f} GiB no longer holds", file=out)
        return None
    print(f"warning: estimated peak {peak / GIB:.1f} GiB per GPU (plan: {plan.prediction.peak_vram_bytes / GIB:.1f} "
          f"GiB) on {gpu} ({mem / GIB:.1f} GiB)", file=out)
    if peak > mem and not force:
        raise BadInput(f"with these settings the run needs {peak / GIB:.1f} GiB per GPU, more than the planned "
                       f"{gpu}'s {mem / GIB:.1f} GiB; keep the plan's settings, make a new plan, or pass --force")
    return peak
