"""Cost meter: what a run has cost so far and what it will cost at its ETA.

Prices are per instance per hour (all its GPUs together), like `catalog.prices.Offer.price_per_hour`;
a caller holding a per-GPU price multiplies by the GPU count first (`per_instance_price`). Providers
bill in units (per second, per minute, per hour) with a minimum, so an elapsed time is rounded up to
the unit and raised to the minimum before it is priced. Every resumed segment runs on a fresh
instance, so each segment is billed on its own and the run's cost is the sum over segments.
"""

from __future__ import annotations

from dataclasses import dataclass

from cheaptune.errors import Infeasible
from cheaptune.estimate.cost.cost import SECONDS_PER_HOUR, billed_seconds, compute_cost

__all__ = ["CostMeter", "billed_seconds", "check_budget", "per_instance_price", "usd"]


def per_instance_price(price_per_gpu_hour: float, gpu_count: int) -> float:
    """The instance price when an offer quotes its price per GPU."""
    return price_per_gpu_hour * gpu_count


@dataclass(frozen=True)
class CostMeter:
    """Prices one segment's elapsed seconds; `prior_usd` is what earlier segments cost."""

    price_per_hour: float
    billing_unit_s: float = 1
    min_billed_s: float = 0
    prior_usd: float = 0.0

    def segment_cost(self, elapsed_s: float) -> float:
        """Billed cost of this segment after `elapsed_s` seconds."""
        return compute_cost(elapsed_s, self.price_per_hour, self.billing_unit_s, self.min_billed_s)

    def accrued(self, elapsed_s: float) -> float:
        """Run total pro rata (no rounding): the money burned so far, used for alert thresholds."""
        return self.prior_usd + max(elapsed_s, 0.0) * self.price_per_hour / SECONDS_PER_HOUR

    def billed(self, elapsed_s: float) -> float:
        """Run total as billed if the instance stopped after `elapsed_s` seconds of this segment."""
        return self.prior_usd + self.segment_cost(elapsed_s)

    def projected(self, elapsed_s: float, done_fraction: float) -> float | None:
        """Billed run total at the ETA, extrapolating this segment's pace; None before any progress."""
        if done_fraction <= 0:
            return None
        return self.billed(elapsed_s / min(done_fraction, 1.0))


def usd(x: float) -> str:
    """Money as printed everywhere: cents from $1 up, four decimals below (a cap of $0.15 is exact)."""
    return f"${x:,.2f}" if abs(x) >= 1 else f"${x:.4f}"


def check_budget(projected_usd: float, budget_usd: float | None, force: bool = False) -> None:
    """Refuse to start when the projected cost exceeds the budget (exit code 3), unless forced.

    The trainer calls this before training with its projected total; `force` starts anyway and the
    cap then stops the run at the budget.
    """
    if budget_usd is None or force or projected_usd <= budget_usd:
        return
    raise Infeasible(
        f"projected cost ${projected_usd:.2f} is above the budget ${budget_usd:.2f}; "
        "raise --budget, pick a cheaper plan, or pass --force to start anyway and stop at the cap"
    )
