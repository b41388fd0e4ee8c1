"""Spot preemptions: the Young/Daly checkpoint interval and the expected extra time.

The process modelled (the Monte-Carlo simulation in tests/estimate/test_spot.py implements exactly this,
so the two must agree): W seconds of
work run in segments of tau seconds, each followed by a checkpoint of C seconds (not after the last).
Preemptions arrive as a Poisson process at rate lambda while a segment or its checkpoint runs; a
preemption loses the segment in progress and costs R seconds of restart (re-provision, install,
reload), during which no further preemption is counted. The first start-up (S seconds, before any work) is
exposed too: a preemption there loses what of it ran and costs a restart. A segment of exposed length L then
takes (1/lambda + R) (exp(lambda L) - 1) seconds in expectation (the classic renewal argument).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

PESSIMISTIC_RATE_FACTOR = 2.0  # a rate without a stated range: the pessimistic bound doubles it


def young_daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Work between checkpoints that minimises expected waste: sqrt(2 x C x MTBF) (Young 1974, Daly 2006)."""
    return math.sqrt(2.0 * max(checkpoint_s, 1e-9) * mtbf_s)


def _exposures(work_s: float, interval_s: float, checkpoint_s: float, startup_s: float) -> list[tuple[float, int]]:
    """(seconds exposed to a preemption, how many such), in order: the start-up, the segments each followed by
    its checkpoint, then the last segment (no checkpoint after it). Counted, not listed one by one: a long job
    at a short interval has billions of segments (`plan --tokens 1e15 --epochs 1000` ran out of memory)."""
    n_full = int(work_s // interval_s)
    rest = work_s - n_full * interval_s
    if rest > 1e-9:  # n_full whole segments, then the rest
        runs = [(interval_s + checkpoint_s, n_full), (rest, 1)]
    elif n_full > 0:  # whole segments only: the last has no checkpoint after it
        runs = [(interval_s + checkpoint_s, n_full - 1), (interval_s, 1)]
    else:
        runs = [(0.0, 1)]
    return ([(startup_s, 1)] if startup_s > 0 else []) + [(e, n) for e, n in runs if n > 0]


def expected_wall_s(work_s: float, rate_per_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                    startup_s: float = 0.0) -> float:
    """Expected wall time to finish `work_s` seconds of work after `startup_s` of start-up, under the model above."""
    total = 0.0
    for exposed, count in _exposures(work_s, interval_s, checkpoint_s, startup_s):
        if rate_per_s <= 0:
            total += count * exposed
        else:
            total += count * (1.0 / rate_per_s + restart_s) * math.expm1(rate_per_s * exposed)
    return total


@dataclass(frozen=True)
class SpotEstimate:
    interval_s: float
    checkpoint_s: float
    restart_s: float
    rate_per_hour: float
    expected_extra_s: float
    pessimistic_extra_s: float
    expected_preemptions: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def spot_overhead(work_s: float, rate_per_hour: float, checkpoint_s: float, restart_s: float,
                  high_rate_per_hour: float | None = None, startup_s: float = 0.0) -> SpotEstimate:
    """Extra seconds (checkpoints + lost work + restarts) for a spot run after `startup_s` of start-up (counted
    as exposed, not as extra), expected and pessimistic (at `high_rate_per_hour`, the top of the rate's published
    range; 2x the rate when none is given)."""
    rate = rate_per_hour / 3600.0
    high = (rate * PESSIMISTIC_RATE_FACTOR if high_rate_per_hour is None else max(high_rate_per_hour / 3600.0, rate))
    if high <= 0 or work_s <= 0:
        return SpotEstimate(work_s, checkpoint_s, restart_s, rate_per_hour, 0.0, 0.0, 0.0)
    tau = min(young_daly_interval(checkpoint_s, 1.0 / (rate if rate > 0 else high)), work_s)
    expected = expected_wall_s(work_s, rate, tau, checkpoint_s, restart_s, startup_s) - work_s - startup_s
    worse = expected_wall_s(work_s, high, tau, checkpoint_s, restart_s, startup_s) - work_s - startup_s
    return SpotEstimate(tau, checkpoint_s, restart_s, rate_per_hour, expected, worse,
                        rate * (startup_s + work_s + expected))
