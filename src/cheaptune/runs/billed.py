"""The billed rate against the planned one: the price of the instance that really runs, not the plan's.

A catalog price can be stale or wrong for the machine SkyPilot launched (a marketplace listing changed,
another region of the task's `any_of`), so the meter, the budget projection and `report` use what is
billed. More than OVER above the plan is said in one line, recorded as a registry event, and the plan's
cost is projected again at the billed rate against the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheaptune.runs.meter import usd

OVER = 0.05  # billed more than 5% above the plan's rate: said, recorded, re-projected
EVENT = "billed_rate"


@dataclass(frozen=True)
class BilledRate:
    """Planned and billed USD per hour for the whole job (all nodes), and where the billed one came from."""

    planned: float
    billed: float
    source: str

    @property
    def over(self) -> bool:
        return self.billed > self.planned * (1 + OVER)

    def projected(self, predicted_usd: float) -> float:
        """The plan's predicted cost at the billed rate. The whole total scales (storage and egress too), so
        the projection errs high, never low."""
        return predicted_usd * self.billed / self.planned if self.planned > 0 else predicted_usd

    def line(self, predicted_usd: float | None, budget_usd: float | None) -> str:
        """One line: both rates, and the plan's cost projected again against the budget."""
        pct = (self.billed / self.planned - 1) * 100 if self.planned > 0 else float("inf")
        text = (f"billed rate {usd(self.billed)}/h is {pct:.0f}% above the plan's {usd(self.planned)}/h "
                f"({self.source})")
        if predicted_usd is None:
            return f"{text}; the meter uses the billed rate"
        new = self.projected(predicted_usd)
        text += f"; at that rate the plan costs {usd(new)} (planned {usd(predicted_usd)})"
        if budget_usd is None:
            return f"{text}; no budget set"
        if new > budget_usd:
            return f"{text}, over the {usd(budget_usd)} budget: the cap stops it at {usd(budget_usd)}"
        return f"{text}, within the {usd(budget_usd)} budget"

    def detail(self, predicted_usd: float | None, budget_usd: float | None) -> dict:
        """The registry event's detail (`message`: the line, as report prints events)."""
        return {"message": self.line(predicted_usd, budget_usd), "planned_per_hour": self.planned, "billed_per_hour": self.billed, "source": self.source,
                "over": self.over, "projected_usd": None if predicted_usd is None else self.projected(predicted_usd),
                "budget_usd": budget_usd}


def latest(run: dict) -> dict | None:
    """The last billed-rate event of a registry run record (Registry.get_run), or None."""
    found = [e["detail"] for e in run.get("events", []) if e.get("kind") == EVENT and isinstance(e.get("detail"), dict)]
    return found[-1] if found else None


def against_plan(cfg: Any, plan_path: str | Path) -> tuple[Any, str | None]:
    """`train --plan` with a metered rate (`--price-per-hour`, what launch learned SkyPilot bills) more than
    OVER above the plan's: the config with its predicted cost projected at that rate (the preflight and the
    guard then hold it against the budget as usual), its registry event detail kept on the config
    (`_billed`, recorded when the run opens), and the line to print. Unchanged otherwise."""
    from cheaptune.plan.planfile import load

    offer = load(plan_path).offer
    planned = offer.price_per_hour * offer.num_nodes  # the run line meters the whole job (task.offer_prices)
    if cfg.price_per_hour is None or planned <= 0:
        return cfg, None
    rate = BilledRate(planned, cfg.price_per_hour, "the metered --price-per-hour")
    if not rate.over:
        return cfg, None
    line = f"warning: {rate.line(cfg.predicted_cost_usd, cfg.budget_usd)}"
    detail = rate.detail(cfg.predicted_cost_usd, cfg.budget_usd)
    if cfg.predicted_cost_usd is not None:
        cfg = cfg.model_copy(update={"predicted_cost_usd": rate.projected(cfg.predicted_cost_usd)})
    cfg._billed = detail
    return cfg, line
