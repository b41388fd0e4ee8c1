"""A memory estimate's record and what every fit does with one: the QLoRA range, its undoing, the micro-batch search.

Why its own module: the one-GPU estimate (memory), its sharded form (sharding) and the simulation's cold path
(compute) all build or read a MemoryEstimate; holding it here lets each depend on it without depending on the
others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cheaptune.estimate.memory import overheads


@dataclass
class MemoryEstimate:
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_total_bytes: int
    breakdown: dict[str, int]
    phase_peaks: dict[str, int]
    trainable_params: int
    total_params: int
    basis: str  # "simulated" | "analytic"
    inputs: dict[str, Any]
    version: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class FitResult:
    micro_batch: int
    grad_ckpt: bool
    estimate: MemoryEstimate


def with_range(est: MemoryEstimate, method: str, fraction: float | None = None) -> MemoryEstimate:
    """QLoRA holds terms beyond the NF4 weights that no GPU has measured for this estimator yet (dequantized
    weights, bitsandbytes workspace, load-time peak): its estimate is a range, [simulated, simulated peak allocated
    x (1 + qlora_range_fraction)] (overheads.yaml), and device_total_bytes, what every fit checks, is the upper end.
    The peaks stay the simulated ones; details['range'] holds both ends per metric."""
    if method != "qlora":
        return est
    f = overheads.constants()["qlora_range_fraction"] if fraction is None else fraction
    est = point_of(est)  # from the simulated end, so applying it again changes nothing
    hi = int(est.peak_allocated_bytes * (1 + f))
    more = overheads.reserved_and_total(hi)[0] - overheads.reserved_and_total(est.peak_allocated_bytes)[0]
    hi_reserved, hi_total = est.peak_reserved_bytes + more, est.device_total_bytes + more  # slack on the extra too
    rng = {"peak_allocated_bytes": [est.peak_allocated_bytes, hi], "peak_reserved_bytes": [est.peak_reserved_bytes,
           hi_reserved], "device_total_bytes": [est.device_total_bytes, hi_total], "fraction": f,
           "why": "QLoRA terms not yet measured on a GPU: the plan fits the upper end"}
    return dataclasses.replace(est, device_total_bytes=hi_total, details={**est.details, "range": rng},
                               breakdown={**est.breakdown, "qlora_margin": hi_total - est.device_total_bytes})


def point_of(est: MemoryEstimate) -> MemoryEstimate:
    """The simulated estimate without its QLoRA range (with_range undone)."""
    if "range" not in est.details:
        return est
    details = {k: v for k, v in est.details.items() if k != "range"}
    return dataclasses.replace(est, device_total_bytes=est.details["range"]["device_total_bytes"][0], details=details,
                               breakdown={k: v for k, v in est.breakdown.items() if k != "qlora_margin"})


def fit_with(estimate_at: Callable[[int, bool], MemoryEstimate], budget: float,
             max_micro_batch: int) -> FitResult | None:
    """The fit search shared by one GPU and N GPUs: `estimate_at(micro_batch, grad_ckpt)` gives the
    device total to compare with `budget` (bytes)."""
    for gc in (False, True):
        e1 = estimate_at(1, gc)
        if e1.device_total_bytes > budget:
            continue
        e2 = estimate_at(2, gc) if max_micro_batch >= 2 else e1
        slope = max(e2.device_total_bytes - e1.device_total_bytes, 1)
        b = int(min(max_micro_batch, 1 + (budget - e1.device_total_bytes) // slope))
        est = estimate_at(b, gc) if b > 2 else (e2 if b == 2 else e1)
        while b > 1 and est.device_total_bytes > budget:
            b -= 1
            est = estimate_at(b, gc)
        return FitResult(b, gc, est)
    return None
