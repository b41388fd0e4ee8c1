"""Planning from a budget: the most epochs (or the largest share of the data) a budget buys.

Each priced option is re-priced at a scaled workload (pricing.repriced, pure) and the scale is found
by bisection: cost only grows with tokens, though in billing-unit steps. The budget is judged at each option's p90
total (pricing's interval), so what it buys fits the budget in 9 of 10 cases. The option that buys the most
wins (ties: the cheaper); the caller then plans that workload under the budget to explain it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from cheaptune.plan.pricing import Option, repriced
from cheaptune.plan.workload import Constraints, Workload

MAXIMIZE = ("epochs", "tokens")
MAX_EPOCHS = 10_000.0
STEPS = 40  # bisection steps: 2^-40 of the bracket
CANDIDATES = 12  # the cheapest options at the asked workload are re-priced


def scaled(w: Workload, what: str, scale: float) -> Workload:
    """The workload with `scale` epochs, or with that share of the tokens per epoch."""
    if what == "epochs":
        return dataclasses.replace(w, epochs=scale)
    return dataclasses.replace(w, tokens=max(1, int(w.tokens * scale)))


def _within(o: Option, w: Workload, what: str, scale: float, budget: float, deadline: float | None,
            shape: Any, consts: dict) -> bool:
    p = repriced(o, scaled(w, what, scale), shape, consts)
    return p90_total(p) <= budget and (deadline is None or p.hours <= deadline)


def p90_total(o: Option) -> float:
    """The total $ a budget is judged at: the option's p90 (it fits the budget in 9 of 10 cases)."""
    return max(o.total, o.details.get("interval", {}).get("total_usd", [o.total] * 3)[2])


def most_within(options: list[Option], w: Workload, what: str, budget: float, deadline: float | None,
                shape: Any, consts: dict) -> tuple[float, Option] | None:
    """(scale, option) buying the most within budget and deadline; None when not even a sliver fits."""
    best: tuple[float, Option] | None = None
    top = 1.0 if what == "tokens" else MAX_EPOCHS
    for o in options[:CANDIDATES]:
        if o.fit is None or o.offer is None:
            continue
        fits = lambda s, o=o: _within(o, w, what, s, budget, deadline, shape, consts)  # noqa: E731
        lo, hi = 0.0, min(1.0, top)
        while hi < top and fits(hi):  # bracket: double until over
            lo, hi = hi, min(hi * 2, top)
        if fits(hi):
            lo = hi
        else:
            for _ in range(STEPS):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        if lo > 0 and (best is None or lo > best[0] * (1 + 1e-9)):
            best = (lo, o)
    return best


def plan_for_budget(run: Callable[[Constraints, Workload], Any], c: Constraints, w: Workload, what: str,
                    shape: Any, consts: dict | None = None) -> Any:
    """`plan --budget USD --maximize epochs|tokens`: plan the most the budget buys. `run(c, w)` plans."""
    from cheaptune.errors import BadInput, Infeasible
    from cheaptune.estimate.cost.cost import constants

    if what not in MAXIMIZE:
        raise BadInput(f"--maximize must be one of {', '.join(MAXIMIZE)}; got {what!r}")
    if c.budget_usd is None:
        raise BadInput("--maximize needs --budget USD: it plans the most that budget buys")
    consts = consts or constants()
    free = run(dataclasses.replace(c, budget_usd=None, deadline_hours=None), w)
    got = most_within(free.options, w, what, c.budget_usd, c.deadline_hours, shape, consts)
    if got is None:
        best = free.recommended
        floor = p90_total(repriced(best, scaled(w, what, 1e-6), shape, consts))
        free.advice = [f"raise the budget above ${floor:.2f}: start-up and minimum billing of the cheapest option, "
                       f"{best.label()}, cost that before any training"]
        err = Infeasible(f"--budget {c.budget_usd:g} buys no training within the limits. To make it feasible: "
                         + free.advice[0])
        err.result = free
        raise err
    scale, option = got
    if what == "epochs" and scale >= 0.01:
        scale = math.floor(scale * 100) / 100
    w2 = scaled(w, what, scale)
    result = run(c, w2)
    bought = (f"{scale:g} epochs ({w2.train_tokens:,.0f} tokens)" if what == "epochs" else
              "the whole dataset" if scale >= 1.0 else f"{scale:.1%} of the data ({w2.tokens:,} tokens per epoch)")
    result.notes.insert(0, f"--budget {c.budget_usd:g} buys {bought} with {option.label()}, judged at p90: it fits "
                           "the budget in 9 of 10 cases")
    return result
