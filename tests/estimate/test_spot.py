"""Young/Daly interval, closed-form spot overhead, and the Monte-Carlo check (agree within 5%)."""

from __future__ import annotations

import math
import random

import pytest

from cheaptune.estimate.cost import spot


def simulate_wall_s(
    work_s: float, rate_per_s: float, interval_s: float, checkpoint_s: float, restart_s: float, rng: random.Random,
    startup_s: float = 0.0,
) -> float:
    """One simulated run: exponential inter-arrival times, lost segments redone after a restart."""
    total = 0.0
    for exposed in (e for e, n in spot._exposures(work_s, interval_s, checkpoint_s, startup_s) for _ in range(n)):
        while True:
            t_fail = rng.expovariate(rate_per_s) if rate_per_s > 0 else math.inf
            if t_fail >= exposed:
                total += exposed
                break
            total += t_fail + restart_s
    return total


def monte_carlo_wall_s(
    work_s: float, rate_per_s: float, interval_s: float, checkpoint_s: float, restart_s: float, runs: int = 2000,
    seed: int = 0, startup_s: float = 0.0,
) -> float:
    """Mean wall time over `runs` simulated runs (the check on `expected_wall_s`)."""
    rng = random.Random(seed)
    return sum(simulate_wall_s(work_s, rate_per_s, interval_s, checkpoint_s, restart_s, rng, startup_s)
               for _ in range(runs)) / runs


def test_young_daly():
    assert spot.young_daly_interval(60, 3600 * 10) == pytest.approx(math.sqrt(2 * 60 * 36000))


def test_no_preemptions_no_overhead():
    est = spot.spot_overhead(3600, 0.0, 30, 300)
    assert est.expected_extra_s == 0 and est.expected_preemptions == 0


def test_overhead_grows_with_rate_and_pessimistic_bound_is_higher():
    low = spot.spot_overhead(10 * 3600, 0.02, 60, 600)
    high = spot.spot_overhead(10 * 3600, 0.2, 60, 600)
    assert 0 < low.expected_extra_s < high.expected_extra_s
    assert high.pessimistic_extra_s > high.expected_extra_s
    assert high.interval_s < low.interval_s  # more preemptions -> checkpoint more often


def test_young_daly_interval_is_near_optimal():
    work, rate, c, r = 20 * 3600, 0.1 / 3600, 120, 600
    tau = spot.young_daly_interval(c, 1 / rate)
    best = spot.expected_wall_s(work, rate, tau, c, r)
    for factor in (0.25, 4.0):
        assert spot.expected_wall_s(work, rate, tau * factor, c, r) > best


@pytest.mark.parametrize("rate_per_hour", [0.05, 0.3, 1.0])
def test_closed_form_agrees_with_monte_carlo(rate_per_hour):
    work, c, r = 8 * 3600, 90, 420
    rate = rate_per_hour / 3600
    tau = min(spot.young_daly_interval(c, 1 / rate), work)
    closed = spot.expected_wall_s(work, rate, tau, c, r)
    simulated = monte_carlo_wall_s(work, rate, tau, c, r, runs=3000, seed=1)
    extra_closed, extra_sim = closed - work, simulated - work
    assert simulated == pytest.approx(closed, rel=0.05)
    assert extra_sim == pytest.approx(extra_closed, rel=0.10)  # the overhead itself, stricter check


def test_start_up_is_exposed_to_preemption():
    """A preemption during the first start-up costs a restart too: more extra time and more expected
    preemptions than the work alone, and the closed form still agrees with the simulation."""
    work, c, r, startup = 4 * 3600, 90, 900, 900
    rate_h = 0.5
    bare = spot.spot_overhead(work, rate_h, c, r)
    exposed = spot.spot_overhead(work, rate_h, c, r, startup_s=startup)
    assert exposed.expected_extra_s > bare.expected_extra_s
    assert exposed.expected_preemptions > bare.expected_preemptions
    rate = rate_h / 3600
    closed = spot.expected_wall_s(work, rate, exposed.interval_s, c, r, startup)
    simulated = monte_carlo_wall_s(work, rate, exposed.interval_s, c, r, runs=3000, seed=2, startup_s=startup)
    assert simulated == pytest.approx(closed, rel=0.05)
    assert closed - work - startup == pytest.approx(exposed.expected_extra_s)


def test_exposures_are_counted_not_listed():
    """The same exposures as one per segment, counted: a long job's billions of segments cost no memory."""
    assert spot._exposures(350, 100, 10, 5) == [(5, 1), (110, 3), (50, 1)]  # start-up, 3 with checkpoints, the rest
    assert spot._exposures(300, 100, 10, 0) == [(110, 2), (100, 1)]  # no checkpoint after the last
    assert spot._exposures(0, 100, 10, 0) == [(0.0, 1)]
    rate, r = 1 / 500, 30.0
    assert spot.expected_wall_s(350, rate, 100, 10, r, 5) == pytest.approx(
        sum((1 / rate + r) * math.expm1(rate * e) for e in (5.0, 110.0, 110.0, 110.0, 50.0)))
    # 1e13 s of work at a ~49-minute Young/Daly interval: ~3.4e9 segments (a list of them ran out of memory)
    long = spot.spot_overhead(1e13, 0.05, 60.0, 300.0)
    assert math.isfinite(long.expected_extra_s) and long.expected_extra_s > 0
