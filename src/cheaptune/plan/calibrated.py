"""A plan corrected by the runs' calibration (cheaptune.runs.calibration), with p10-p90 intervals.

Applied after the pure planner: each option's tokens/s is multiplied by its (GPU, method) speed factor
and its peak by the memory factor, exactly; the training hours, compute (re-billed in the offer's unit),
storage and spot loss follow the new time; options whose calibrated peak no longer fits are dropped; the
rest are ranked again. The plan file keeps the model's own figures (`raw`), in the calibrated order,
because the registry measures runs against them and calibration is fitted on that ratio.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cheaptune.estimate.cost.cost import SECONDS_PER_HOUR, compute_cost
from cheaptune.plan import choose, explain
from cheaptune.plan.candidates import Exclusion, gib
from cheaptune.plan.pricing import Option
from cheaptune.runs.calibration import DEFAULT_SPEED_LOG_SD, Factor, interval


def calibrate_option(o: Option, f: Factor) -> Option:
    """`o` with the factor applied: tokens/s x speed, peak x memory, time and money from the new speed."""
    speed, memory = f.speed or 1.0, f.memory or 1.0
    train_h = o.details.get("train_hours", o.hours)
    new_train_h = train_h / speed
    start_s = sum(o.details.get("startup_s", {}).values()) + sum(o.details.get("end_s", {}).values())
    hours = o.hours + new_train_h - train_h
    cost = dict(o.cost)
    compute = compute_cost(start_s + new_train_h * SECONDS_PER_HOUR, o.price_per_hour, o.billing_unit_s, o.min_billed_s)
    cost["compute"] = compute * o.num_nodes
    if o.hours > 0:
        cost["storage"] = cost.get("storage", 0.0) * hours / o.hours
    cost["spot_overhead"] = cost.get("spot_overhead", 0.0) / speed
    cost["total"] = sum(v for k, v in cost.items() if k != "total")
    details = {**o.details, "train_hours": round(new_train_h, 4),
               "calibration": {"memory": memory, "speed": speed, "runs": f.runs, "gpu": f.gpu}}
    return dataclasses.replace(
        o, tokens_per_s=round(o.tokens_per_s * speed, 1), peak_vram_bytes=int(o.peak_vram_bytes * memory),
        hours=round(hours, 4), cost=cost, pessimistic_total=round(o.pessimistic_total + cost["total"] - o.total, 4),
        details=details)


def apply(result: Any, factors: dict[tuple[str, str], Factor]) -> tuple[Any, Any]:
    """(calibrated result to show, raw result to save); the result itself is not changed."""
    c = result.constraints
    shown, raw, excluded, used = [], [], list(result.excluded), set()
    for o in result.options:
        f = factors.get((o.gpu, o.method))
        new = calibrate_option(o, f) if f else o
        if f:
            used.add(f)
            if new.peak_vram_bytes > new.gpu_memory_bytes * (1 - c.headroom):
                excluded.append(Exclusion({"method": o.method, "gpu": o.gpu, "gpu_count": o.gpu_count,
                                           "gpu_memory_bytes": o.gpu_memory_bytes},
                                          f"{o.method} on {o.gpu}: calibrated peak {gib(new.peak_vram_bytes)} does "
                                          f"not fit ({f.note()})", "memory"))
                continue
        shown.append(new)
        raw.append(o)
    order = sorted(range(len(shown)), key=lambda i: choose.rank_key(c.optimize)(shown[i]))
    shown, raw = [shown[i] for i in order], [raw[i] for i in order]
    notes = [f"{f.note()}: memory x{f.memory or 1:.3f}, speed x{f.speed or 1:.3f}"
             for f in sorted(used, key=lambda f: (f.gpu, f.method))]
    calibrated = dataclasses.replace(result, options=shown, excluded=excluded, notes=[*result.notes, *notes])
    if shown:
        calibrated.why = explain.why(shown[0], shown, c.optimize)
        calibrated.why_not = explain.why_not(shown, excluded, c.optimize, c.max_gpus)
    return calibrated, dataclasses.replace(result, options=raw)


def add_intervals(result: Any, factors: dict[tuple[str, str], Factor]) -> None:
    """p10-p90 of hours and total $ on every option (details) and p50/p90 for the recommendation (a note). From
    the user's own runs where they calibrated that GPU and method, else from the step-time model's held-out
    errors on the public rows most like the option (pricing's `interval`, estimate.intervals)."""
    for o in result.options:
        f = factors.get((o.gpu, o.method))
        sd = f.speed_log_sd if f and f.speed_log_sd is not None else None
        public = o.details.get("interval")
        if sd is None and public:
            h, t = public["hours"], public["total_usd"]
            o.details["p10_p90"] = {"hours": [h[0], h[2]], "total_usd": [t[0], t[2]], "p50_hours": h[1],
                                    "p50_usd": t[1], "basis": public["basis"]}
            continue
        h, t = interval(o.hours, sd), interval(o.total, sd)
        o.details["p10_p90"] = {"hours": [round(h[0], 4), round(h[1], 4)],
                                "total_usd": [round(t[0], 4), round(t[1], 4)], "p50_hours": o.hours,
                                "p50_usd": o.total, "basis": f.note() if f and sd is not None else "default spread"}
    best = result.recommended
    if best is not None:
        p = best.details["p10_p90"]
        basis = (f"the spread of {p['basis'].removeprefix('calibrated from ')}" if p["basis"].startswith("calibrated")
                 else p["basis"] if p["basis"] != "default spread" else
                 f"the default spread: the speed model's error on public measurements (log sd {DEFAULT_SPEED_LOG_SD})")
        result.notes.append(f"p50 {p['p50_hours']:.2f} h, ${p['p50_usd']:.2f}; p90 {p['hours'][1]:.2f} h, "
                            f"${p['total_usd'][1]:.2f} (p10-p90: {p['hours'][0]:.2f}-{p['hours'][1]:.2f} h, "
                            f"${p['total_usd'][0]:.2f}-${p['total_usd'][1]:.2f} total, {basis})")
