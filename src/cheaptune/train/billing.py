"""Bill a run at the price of what it runs on: a plan's price is its GPU's, not the CPU's or another board's.

A plan priced for an H100 and run on this laptop's CPU (or on an A10G) would otherwise meter the H100's
$/h, and its budget would stop a free run. Off the plan's GPU, the plan's price (and the budget it came
with) is dropped unless the config file or a flag set one, and one line says so; a budget of the user's
own then needs their price (`--budget needs a price`, exit 2).
"""

from __future__ import annotations

from typing import Any

from cheaptune.runs.meter import usd


def running_on(device: str) -> str | None:
    """The catalog name of the GPU this process trains on; None on the CPU (or an unknown board)."""
    if device != "cuda":
        return None
    from cheaptune.train.probe import device_name

    return device_name()


def bill_where_it_runs(cfg: Any, here: str | None) -> tuple[Any, str | None]:
    """(config, note): without the plan's price when the run is not on the plan's GPU (`here`: the GPU it runs
    on, None for the CPU), the note naming both; unchanged on the plan's GPU or with a price of the user's own."""
    from cheaptune.train.probe import on_planned_board

    planned = cfg.predicted_gpu
    if planned is None or on_planned_board(here, planned) or not cfg.price_per_hour or not getattr(cfg, "_plan_priced", False):
        return cfg, None
    where = here or "the CPU"
    update: dict[str, Any] = {"price_per_hour": None, "predicted_cost_usd": None}
    cap = ""
    if cfg.budget_usd and getattr(cfg, "_plan_budgeted", False):  # the plan's budget was sized at its GPU's price
        update["budget_usd"] = None
        cap = f" and the plan's {usd(cfg.budget_usd)} budget does not apply"
    note = (f"note: the plan priced {planned} at {usd(cfg.price_per_hour)}/h; this run is on {where}, so it is not "
            f"billed at that price (no cost is metered{cap}): pass --price-per-hour with {where}'s price "
            f"(and --budget) to meter it")
    return cfg.model_copy(update=update), note
