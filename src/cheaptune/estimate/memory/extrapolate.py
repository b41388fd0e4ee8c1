"""Simulate a shortened stack and extrapolate linearly in the number of blocks.

Memory per phase is exactly affine in the block count for a repeating stack (docs/sources.md#layer-count-extrapolation:
7B 50.697 extrapolated vs 50.694 GiB simulated), so two short runs give the full model in seconds.
Alternating stacks (sliding/global attention) and MoE stacks with dense first layers repeat with a
period longer than one block: we simulate prefix + 1 period and prefix + 2 periods.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from cheaptune.estimate.memory.layers import layer_period, set_layer_count
from cheaptune.estimate.memory.simulate import SimResult, simulate


def _lerp(a: int, b: int, x1: int, x2: int, x: int) -> int:
    return round(a + (b - a) * (x - x1) / (x2 - x1))


def simulate_extrapolated(req, cfg) -> tuple[SimResult, dict]:
    """Simulated result for the full depth, and how it was obtained (layers simulated)."""
    n = int(cfg.num_hidden_layers)
    prefix, period = layer_period(cfg)
    # 2 and 3 periods: the top and bottom of the stack are distinct blocks in both runs
    l1, l2 = prefix + 2 * period, prefix + 3 * period
    if n <= l2:
        return simulate(req, cfg), {"layers_simulated": [n], "extrapolated": False}
    runs = []
    for k in (l1, l2):
        small = copy.deepcopy(cfg)
        set_layer_count(small, k)
        runs.append(simulate(req, small))
    a, b = runs
    phases = {ph: _lerp(a.phase_peaks[ph], b.phase_peaks[ph], l1, l2, n) for ph in a.phase_peaks}
    buckets = set(a.backward_buckets) & set(b.backward_buckets)
    if buckets:  # backward = max of affine candidates, extrapolated one by one (never below the line)
        phases["backward"] = max(
            phases["backward"],
            *(_lerp(a.backward_buckets[k], b.backward_buckets[k], l1, l2, n) for k in buckets if k != "mid"),
        )
    peak = max(phases.values())
    cats = set(a.breakdown) | set(b.breakdown)
    breakdown = {c: max(0, _lerp(a.breakdown.get(c, 0), b.breakdown.get(c, 0), l1, l2, n)) for c in cats}
    breakdown["temporaries"] = breakdown.get("temporaries", 0) + peak - sum(breakdown.values())
    static = {c: _lerp(a.static.get(c, 0), b.static.get(c, 0), l1, l2, n) for c in set(a.static) | set(b.static)}
    res = replace(
        b, phase_peaks=phases, breakdown={k: v for k, v in breakdown.items() if v > 0},
        peak_phase=max(phases, key=phases.get), static=static,
        trainable_params=_lerp(a.trainable_params, b.trainable_params, l1, l2, n),
        total_params=_lerp(a.total_params, b.total_params, l1, l2, n),
    )
    return res, {"layers_simulated": [l1, l2], "extrapolated": True}
