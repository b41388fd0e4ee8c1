"""A plan corrected by stored calibration factors: its numbers change by exactly those factors."""

from __future__ import annotations

import pytest

from cheaptune.plan.calibrated import add_intervals, apply
from cheaptune.runs.calibration import Factor
from tests.plan.test_planner import plan


def _key(o):
    return (o.method, o.gpu, o.provider, o.region, o.spot, o.instance_type)


def test_plan_numbers_change_by_exactly_the_stored_factors():
    raw = plan()
    # an option that still fits once its memory grows 5% (one that does not is excluded, not re-numbered)
    best = next(o for o in raw.options if o.peak_vram_bytes * 1.05 <= o.gpu_memory_bytes * 0.9)
    f = Factor(best.gpu, best.method, memory=1.05, speed=0.8, runs=4, speed_log_sd=0.05)
    shown, saved = apply(raw, {(best.gpu, best.method): f})
    assert all(any(s is o for o in raw.options) for s in saved.options)  # saved: the model's own figures
    by_key = {_key(o): o for o in shown.options}
    checked = 0
    for o in raw.options:
        new = by_key.get(_key(o))
        if (o.gpu, o.method) != (best.gpu, best.method):
            assert new is o  # other GPUs and methods are untouched
            continue
        checked += 1
        assert new.tokens_per_s == pytest.approx(o.tokens_per_s * 0.8, abs=0.06)
        assert new.peak_vram_bytes == int(o.peak_vram_bytes * 1.05)
        assert new.details["train_hours"] == pytest.approx(o.details["train_hours"] / 0.8, abs=1e-4)
        assert new.hours - o.hours == pytest.approx(o.details["train_hours"] * (1 / 0.8 - 1), abs=2e-4)
        assert new.total > o.total
    assert checked >= 1
    assert any(n.startswith(f"calibrated from 4 runs on {best.gpu} ({best.method})") for n in shown.notes)
    assert [o.total for o in shown.options] == sorted(o.total for o in shown.options)
    assert len(saved.options) == len(shown.options)
    assert [_key(o) for o in saved.options] == [_key(o) for o in shown.options]


def test_a_calibrated_peak_that_no_longer_fits_drops_the_option():
    raw = plan()
    best = raw.recommended
    shown, _ = apply(raw, {(best.gpu, best.method): Factor(best.gpu, best.method, memory=3.0, speed=1.0, runs=2)})
    assert all((o.gpu, o.method) != (best.gpu, best.method) for o in shown.options)
    assert any("calibrated peak" in e.reason for e in shown.excluded)


def test_intervals_from_the_public_residuals_or_the_runs_own_spread():
    raw = plan()
    best = raw.recommended
    add_intervals(raw, {})
    lo, hi = best.details["p10_p90"]["hours"]
    assert lo < hi and lo <= best.details["p10_p90"]["p50_hours"] <= hi
    assert best.details["p10_p90"]["basis"] == best.details["interval"]["basis"]  # estimate.intervals
    note = raw.notes[-1]
    assert note.startswith("p50 ") and "; p90 " in note and "p10-p90" in note and "held-out" in note
    narrow = plan()
    f = Factor(narrow.recommended.gpu, narrow.recommended.method, 1.0, 1.0, runs=5, speed_log_sd=0.02)
    add_intervals(narrow, {(f.gpu, f.method): f})
    lo2, hi2 = narrow.recommended.details["p10_p90"]["hours"]
    assert hi2 - lo2 < hi - lo and "5 runs" in narrow.notes[-1]
