"""Inline plan options (`--gpu`, `--provider`, `--spot`, ...) applied over a plan file before launch.

Changing where it runs changes the price, so the new offer's price comes from the same offers the
planner reads (`catalog.sources.load_offers`: bundled snapshot, SkyPilot catalogs, user CSVs), never a copy.
"""

from __future__ import annotations

from cheaptune.errors import BadInput
from cheaptune.plan.planfile import Offer, PlanFile


def _priced_offer(gpu: str, count: int, provider: str, region: str | None, spot: bool, base: Offer) -> Offer:
    """The catalog's offer for the new place, as many instances as `base` (the plan's) over the same network:
    a multi-node plan moved to another region or provider stays multi-node (it became one node: 8 GPUs running
    what was sized per GPU for 16)."""
    from cheaptune.catalog.prices import filter_offers
    from cheaptune.catalog.sources import load_offers

    hits = [o for o in filter_offers(load_offers(), gpu=gpu, provider=provider, spot=spot) if o.gpu_count == count]
    if region:
        hits = [o for o in hits if o.region == region] or hits
    if not hits:
        kind = "spot" if spot else "on-demand"
        raise BadInput(
            f"no {kind} price for {gpu}:{count} on {provider}; `cheaptune prices --gpu {gpu}` lists offers, "
            "or add one in a prices CSV"
        )
    o = hits[0]
    return Offer(
        provider=o.provider, gpu=o.gpu, gpu_count=o.gpu_count, num_nodes=base.num_nodes, network=base.network,
        region=region or o.region, spot=o.spot,
        kind=o.kind, instance_type=o.instance_type, price_per_hour=o.price_per_hour,
        billing_unit_s=o.billing_unit_s, min_billed_s=o.min_billed_s, total_cost=None,
    )


def apply_overrides(
    plan: PlanFile, *, gpu: str | None = None, gpu_count: int | None = None, provider: str | None = None,
    region: str | None = None, spot: bool | None = None, model: str | None = None, dataset: str | None = None,
    budget: float | None = None,
) -> PlanFile:
    """A copy of the plan with the inline options; a new place to run drops the failover alternatives."""
    if gpu_count is not None and gpu_count < 1:
        raise BadInput(f"--gpu-count {gpu_count} must be at least 1")
    if budget is not None and budget <= 0:
        raise BadInput(f"--budget {budget} must be a positive USD amount")
    out = plan.model_copy(deep=True)
    if any(v is not None for v in (gpu, gpu_count, provider, region, spot)):
        from cheaptune.catalog.gpus import resolve_gpu

        base = plan.offer
        want_gpu = resolve_gpu(gpu).name if gpu else base.gpu
        out.offer = _priced_offer(
            want_gpu, gpu_count or base.gpu_count, (provider or base.provider).lower(),
            region, base.spot if spot is None else spot, base,
        )
        out.alternatives = []
    if model is not None:
        out.model = model
    if dataset is not None:
        out.dataset = dataset
    if budget is not None:
        out.budget_usd = budget
    return out
