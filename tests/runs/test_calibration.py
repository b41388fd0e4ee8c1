"""Calibration: factors fitted from registry runs recover the true ones; CSV export/import round-trips."""

from __future__ import annotations

import math
import random

import pytest

from cheaptune.runs import calibration as cal
from cheaptune.runs.registry import Registry

TRUE = {("A100-80GB", "lora"): (1.08, 0.85), ("H100-80GB", "qlora"): (0.93, 1.12)}


def synthetic_runs(reg: Registry, n: int = 12, noise: float = 0.03, seed: int = 0) -> None:
    """Finished runs whose measurements are the prediction x the true factor x log-normal noise."""
    rng = random.Random(seed)
    for (gpu, method), (mem, speed) in TRUE.items():
        for i in range(n):
            predicted_peak, predicted_tps = 20e9 + i * 1e9, 3000.0 + 100 * i
            run = reg.start_run(name=f"{gpu}-{i}", gpu=gpu, method=method, peak_mem_predicted=int(predicted_peak))
            run.event("probe", {"gpu": gpu, "predicted_peak": predicted_peak, "predicted_tokens_per_s": predicted_tps,
                                "tokens_per_s": predicted_tps * speed, "device_used": predicted_peak * mem})
            run.finish("finished", peak_mem_measured=int(predicted_peak * mem * rng.lognormvariate(0, noise)),
                       tokens_per_s=predicted_tps * speed * rng.lognormvariate(0, noise))
    reg.start_run(name="still-running", gpu="A100-80GB", method="lora")  # not finished: ignored
    reg.start_run(name="cpu", method="lora").finish("finished", tokens_per_s=100.0)  # no probe, no GPU: ignored


def test_fit_recovers_true_factors_within_2_percent():
    reg = Registry()
    synthetic_runs(reg)
    factors = {(f.gpu, f.method): f for f in cal.fit(cal.samples(reg))}
    assert set(factors) == set(TRUE)
    for key, (mem, speed) in TRUE.items():
        f = factors[key]
        assert f.runs == 12
        assert f.memory == pytest.approx(mem, rel=0.02) and f.speed == pytest.approx(speed, rel=0.02)
        assert 0.01 < f.speed_log_sd < 0.06  # the noise put in (0.03) is what the spread reports
    assert factors[("A100-80GB", "lora")].note() == "calibrated from 12 runs on A100-80GB (lora)"


def test_interval_spans_the_spread_and_has_a_stated_default():
    lo, hi = cal.interval(10.0, 0.1)
    assert lo * hi == pytest.approx(100.0) and lo < 10.0 < hi  # symmetric in logs around the estimate
    assert hi / 10.0 == pytest.approx(math.exp(1.2816 * 0.1))
    wide = cal.interval(10.0, None)
    assert wide[1] / 10.0 == pytest.approx(math.exp(1.2816 * cal.DEFAULT_SPEED_LOG_SD))


def test_calibrate_cli_fits_shows_exports_and_pools(run_cli, tmp_path):
    code, _, err = run_cli("calibrate")
    assert code == 2 and "no finished run with a probe" in err
    synthetic_runs(Registry())
    code, out, _ = run_cli("calibrate")
    assert code == 0 and "fitted 2 factors from 24 runs" in out and cal.path().is_file()
    code, out, _ = run_cli("calibrate", "--show", "--json")
    assert code == 0 and '"gpu": "A100-80GB"' in out
    shared = tmp_path / "team.csv"
    assert run_cli("calibrate", "--export", str(shared))[0] == 0
    before = cal.load()
    assert run_cli("calibrate", "--import", str(shared))[0] == 0  # pooling a copy of itself: same factors, twice the runs
    after = cal.load()
    for key, f in before.items():
        assert after[key].runs == 2 * f.runs and after[key].speed == pytest.approx(f.speed)
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu,method,memory,speed,runs\nA100-80GB,lora,abc,1.0,3\n")
    code, _, err = run_cli("calibrate", "--import", str(bad))
    assert code == 2 and "line 2" in err and "Traceback" not in err


def test_estimate_judges_a_gpu_on_its_calibrated_peak_and_says_so(capsys):
    from types import SimpleNamespace

    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.cli.estimate import _render

    gib = 2**30
    est = SimpleNamespace(inputs={"model": "m", "method": "lora"}, basis="test", breakdown={"weights": 60 * gib},
                          peak_allocated_bytes=60 * gib, peak_reserved_bytes=62 * gib, device_total_bytes=64 * gib,
                          phase_peaks={}, total_params=1, trainable_params=1, details={})
    gpu = resolve_gpu("A100-80GB")
    _render(est, [gpu], 0.10, {})
    assert " yes" in capsys.readouterr().out  # 64 GiB fits in 72 GiB
    _render(est, [gpu], 0.10, {("A100-80GB", "lora"): cal.Factor("A100-80GB", "lora", 1.25, 0.9, runs=3)})
    out = capsys.readouterr().out
    free = gpu.memory_bytes * 0.9 - 64 * gib * 1.25  # exactly the stored factor on the peak
    assert f"{free / gib:.1f}" in out and " no" in out
    assert "A100-80GB: calibrated from 3 runs on A100-80GB (lora), peak x1.250" in out
