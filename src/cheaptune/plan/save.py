"""Turning a plan result into the plan file that `train --plan` and `launch` read.

The settings written are the ones the recommended option was sized with (estimate.settings), resolved
for its GPU, so `train --plan` runs exactly what the plan priced.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

import cheaptune
from cheaptune.errors import BadInput
from cheaptune.estimate.policy import training_precision
from cheaptune.estimate.settings import TrainSettings, for_gpu
from cheaptune.estimate.time.speedups import PLANNED
from cheaptune.plan import planfile
from cheaptune.plan.planner import PlanResult
from cheaptune.plan.pricing import Option


def _offer(o: Option) -> planfile.Offer:
    return planfile.Offer(
        provider=o.provider, gpu=o.gpu, gpu_count=o.gpu_count, num_nodes=o.num_nodes, network=o.network,
        region=o.region, spot=o.spot, kind=o.kind,
        instance_type=o.instance_type, price_per_hour=o.price_per_hour, billing_unit_s=o.billing_unit_s,
        min_billed_s=o.min_billed_s, total_cost=o.total, price_basis=o.price_basis, price_as_of=o.price_as_of,
    )


def settings_of(best: Option, r: PlanResult, fields: dict[str, Any] | None = None) -> TrainSettings:
    """The settings the option was fitted with: the method's precision on that GPU, the fit's micro-batch
    and checkpointing, the plan's LoRA rank (alpha 2r) and targets, the sharding on several GPUs; from a config
    (`fields`, plan.config_run) its own settings as its fit sized them."""
    w = r.workload
    lora_r = r.constraints.lora_r
    planned = dict(micro_batch=best.micro_batch, grad_accum=best.grad_accum, grad_ckpt=best.grad_ckpt,
                   seq_len=w.seq_len, epochs=w.epochs, gpus=best.total_gpus, sharding=best.sharding,
                   checkpoint_minutes=best.checkpoint_minutes, objective=w.objective,
                   precompute_ref=bool(best.fit and best.fit.fit.precompute_ref))
    bf16 = bool(getattr(best.spec, "bf16", True))
    if fields is not None:
        from cheaptune.plan.config_run import own_settings

        return own_settings(fields, best.method, training_precision(best.method, bf16), **planned)
    fast = {name: name in best.details.get("speedups", {}).get("options", ()) for name in PLANNED}
    return for_gpu(best.method, bf16, lora_r=lora_r, lora_alpha=2 * lora_r, lora_targets=w.lora_targets or "all-linear",
                   **planned, **fast)


def to_planfile(r: PlanResult, model: str, dataset: str | None = None, label: str | None = None,
                fields: dict[str, Any] | None = None) -> planfile.PlanFile:
    """`model`: what from_pretrained loads (catalog.models.loadable_name); `label`: the name planned with;
    `fields`: a config's own settings (plan --config)."""
    best = r.recommended
    if best is None:
        raise ValueError("an infeasible plan has nothing to save")
    w = r.workload
    cost = {k: best.cost[k] for k in ("compute", "storage", "egress", "spot_overhead", "total")}
    try:
        prediction = planfile.Prediction(
            peak_vram_bytes=best.peak_vram_bytes, gpu_memory_bytes=best.gpu_memory_bytes, tokens=w.tokens,
            tokens_per_s=best.tokens_per_s, hours=best.hours,
            cost=planfile.CostBreakdown(**cost, pessimistic_total=best.pessimistic_total if best.spot else None),
        )
        return planfile.PlanFile(
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"), cheaptune_version=cheaptune.__version__,
            model=model, model_label=label if label and label != model else None, dataset=dataset,
            train=settings_of(best, r, fields), offer=_offer(best), prediction=prediction,
            budget_usd=r.constraints.budget_usd, deadline_hours=r.constraints.deadline_hours,
            alternatives=[_offer(o) for o in r.alternatives()],
        )
    except ValidationError as err:  # the plan file holds figures to the ranges train and launch accept
        raise BadInput(f"--save: the recommended option's figures are beyond what a plan file holds "
                       f"({planfile.fields_wrong(err)}); `train` and `launch` would refuse it: plan less work "
                       "(--tokens, --epochs) or more GPUs") from None
