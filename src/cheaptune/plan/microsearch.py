"""The largest micro-batch a plan can run on a memory size, searched over the micro-batches a plan runs.

The peak of one (model, method, precision, micro-batch, sequence, checkpointing) does not depend on the GPU
it is fitted to, so each point is estimated once (`Points`) and reused by every memory size, GPU and offer.
A plan only runs the micro-batches `candidates.planned_micro` returns (16 sequences per step run as 16, 8,
6, 4, 3, 2 or 1), so only those are searched: the affine guess from micro-batches 1 and 2 (memory is close
to affine in the micro-batch) is checked with one estimate, then the rest is bisection over cached points.
The outcome is what `estimate.memory.fit_micro_batch` followed by `planned_micro` gives, with fewer estimates
(no estimate at a micro-batch the plan never runs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cheaptune.plan.candidates import planned_micro

Estimate = Any  # estimate.memory.MemoryEstimate


# bytes per parameter no step of the method goes below: 16-bit base weights (the least any of our precisions keeps;
# QLoRA's 4-bit base: none assumed), and for a full fine-tune a gradient per weight, all held at once when the
# optimizer step clips them (torch.nn.utils.clip_grad_norm_ over every gradient)
FLOOR_BYTES = {"full": 4, "lora": 2, "dora": 2}


def weights_floor(params: int, method: str) -> int:
    """Bytes below which no micro-batch of `method` runs on one GPU: FLOOR_BYTES per parameter plus what every
    device total adds to what is allocated (estimate.memory.overheads: allocator slack, CUDA context). A memory
    size under it is refused without a simulation; 0 for methods without a floor."""
    if method not in FLOOR_BYTES:
        return 0
    from cheaptune.estimate.memory.overheads import reserved_and_total

    return reserved_and_total(FLOOR_BYTES[method] * params)[1]


def planned_points(effective_batch: int, gpus: int, cap: int) -> list[int]:
    """Micro-batches per GPU a plan of `effective_batch` on `gpus` GPUs can run, ascending, up to `cap`."""
    return [b for b in range(1, max(1, cap) + 1) if planned_micro(b, effective_batch, gpus)[0] == b]


class Points:
    """Estimates by (micro-batch, checkpointing), each computed at most once per process."""

    def __init__(self, estimate: Callable[[int, bool], Estimate]):
        self._estimate = estimate
        self._seen: dict[tuple[int, bool], Estimate] = {}

    def at(self, micro: int, ckpt: bool) -> Estimate:
        key = (micro, ckpt)
        if key not in self._seen:
            self._seen[key] = self._estimate(micro, ckpt)
        return self._seen[key]


def largest_fit(points: Points, micros: list[int], budget: float) -> tuple[int, bool, Estimate] | None:
    """(micro-batch, checkpointing, estimate at it): the largest of `micros` whose device total is within
    `budget` bytes, without checkpointing first (it costs a third more compute); None when even the
    smallest does not fit either way. Like estimate.memory.fit_with, an affine guess that fits is taken
    (no search above it); one that does not is bisected down."""
    for ckpt in (False, True):
        found = _largest(lambda b, c=ckpt: points.at(b, c), micros, budget)
        if found is not None:
            return found[0], ckpt, found[1]
    return None


def _largest(at: Callable[[int], Estimate], micros: list[int], budget: float) -> tuple[int, Estimate] | None:
    fits = lambda i: at(micros[i]).device_total_bytes <= budget  # noqa: E731
    if not fits(0):
        return None
    if len(micros) == 1:
        return micros[0], at(micros[0])
    e1, e2 = at(micros[0]).device_total_bytes, at(micros[1]).device_total_bytes
    slope = max((e2 - e1) / (micros[1] - micros[0]), 1.0)
    guess = max(i for i, b in enumerate(micros) if i == 0 or e1 + (b - micros[0]) * slope <= budget)
    if fits(guess):  # as estimate.memory.fit_with: an affine guess that fits is taken
        return micros[guess], at(micros[guess])
    lo, hi = 0, guess  # micros[lo] fits, micros[hi] does not
    while hi - lo > 1:  # bisection: every estimate it makes is cached for the next memory size
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return micros[lo], at(micros[lo])
