"""Stage 4: keep the offers the user allows, drop options past the budget or deadline, rank the rest."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cheaptune.plan.candidates import Exclusion
from cheaptune.plan.price_age import rank_factor
from cheaptune.plan.pricing import Option
from cheaptune.plan.workload import Constraints
from cheaptune.runs.meter import usd


def allowed_offers(offers: Iterable[Any], gpu_names: set[str], c: Constraints) -> tuple[list[Any], list[Exclusion]]:
    """Offers for the GPUs in play that the provider/spot/community/--max-gpus filters allow.

    Multi-GPU instances are kept (the scale-out stage uses them); a GPU offered only in instances larger
    than --max-gpus is excluded with the flag that would allow it."""
    providers = {p.lower() for p in c.providers}
    banned = {p.lower() for p in c.exclude_providers}
    kept: list[Any] = []
    too_big: dict[str, int] = {}
    for o in offers:
        prov = o.provider.lower()
        if o.gpu not in gpu_names or (providers and prov not in providers) or prov in banned:
            continue
        if (c.spot == "never" and o.spot) or (c.spot == "only" and not o.spot):
            continue
        if not c.community and o.kind == "community":
            continue
        if o.gpu_count > c.max_gpus:
            too_big[o.gpu] = min(too_big.get(o.gpu, 1 << 20), o.gpu_count)
            continue
        kept.append(o)
    offered = {o.gpu for o in kept}
    excluded = [
        Exclusion({"gpu": g, "gpu_count": n}, f"{g}: only {n}-GPU instances are offered; allow them with --max-gpus {n}",
                  "offers")
        for g, n in sorted(too_big.items())
        if g not in offered
    ]
    return kept, excluded


def rank_key(objective: str):
    """Time, or cost with an undated, stale or derived price counted TRUST_TOLERANCE dearer (ranking only), so
    a fresh quoted price within that margin comes first (plan/price_age.py)."""
    if objective == "time":
        return lambda o: (o.hours, o.total)
    return lambda o: (o.total * rank_factor(o), o.total, o.hours)


def apply_limits(options: list[Option], c: Constraints) -> tuple[list[Option], list[Exclusion]]:
    """Drop options over budget or past the deadline; one exclusion per (method, GPU) with its best case."""
    ok: list[Option] = []
    worst: dict[tuple[str, str, int, str], tuple[Option, str]] = {}
    for o in options:
        reason = None
        p90 = o.details.get("interval", {}).get("total_usd", [o.total] * 3)[2]  # budgets are judged at p90
        if c.budget_usd is not None and max(o.total, p90) > c.budget_usd:
            over = (f"{usd(o.total)} is over" if o.total > c.budget_usd else
                    f"{usd(o.total)} at p50 but {usd(p90)} at p90, so it fits in fewer than 9 of 10 cases, is over")
            reason = ("budget", f"{o.label()}: {over} the {usd(c.budget_usd)} budget")
        elif c.deadline_hours is not None and o.hours > c.deadline_hours:
            reason = ("deadline", f"{o.label()}: {o.hours:.2f} h is past the {c.deadline_hours:g} h deadline")
        if reason is None:
            ok.append(o)
            continue
        key = (o.method, o.gpu, o.total_gpus, reason[0])
        if key not in worst or o.total < worst[key][0].total:
            worst[key] = (o, reason[1])
    excluded = [
        Exclusion({"method": o.method, "gpu": o.gpu, "gpu_count": o.gpu_count, "num_nodes": o.num_nodes,
                   "sharding": o.sharding, "provider": o.provider, "spot": o.spot,
                   "total": max(o.total, o.details.get("interval", {}).get("total_usd", [0] * 3)[2]) if kind == "budget"
                   else o.total,
                   "hours": o.hours, "startup_hours": round(sum(o.details.get("startup_s", {}).values()) / 3600, 4)},
                  why, kind)
        for (*_, kind), (o, why) in sorted(worst.items())
    ]
    return ok, excluded


def rank(options: list[Option], objective: str) -> list[Option]:
    return sorted(options, key=rank_key(objective))
