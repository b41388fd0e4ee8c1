"""The budget check before anything loads: cheap (no torch, no transformers), so `train` runs it first."""

from __future__ import annotations

from cheaptune.train.config import TrainConfig


def preflight(cfg: TrainConfig, force: bool = False) -> None:
    """Refuse (Infeasible, exit 3) before any model loads when the plan's predicted cost is over the
    budget; `force` starts anyway and the guard then stops the run at the cap. The guard re-projects
    from the measured pace after the first steps."""
    if cfg.budget_usd is None or cfg.price_per_hour is None or cfg.predicted_cost_usd is None:
        return
    from cheaptune.runs.meter import check_budget

    check_budget(cfg.predicted_cost_usd, cfg.budget_usd, force)
