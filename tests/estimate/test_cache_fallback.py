"""A simulation that raised once (code edited mid-run, an interrupted import) must not stick: its analytic
fallback is not stored in the on-disk estimate cache, so the next call simulates; a model that needs custom
code, the one deterministic fallback, is still cached."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory import cache, extrapolate
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory


@pytest.mark.cold_cache
def test_a_simulation_that_raised_once_is_simulated_on_the_next_call(tiny_cfg, monkeypatch):
    real = extrapolate.simulate_extrapolated
    calls = []

    def flaky(req, hf):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient: module reloaded mid-run")
        return real(req, hf)

    monkeypatch.setattr(extrapolate, "simulate_extrapolated", flaky)
    req = EstimateRequest(model=tiny_cfg.to_dict(), method="lora", micro_batch=1, seq_len=32)
    first = estimate_memory(req)
    assert first.basis == "analytic" and first.details[cache.SIMULATION_FAILED]
    second = estimate_memory(req)
    assert len(calls) == 2 and second.basis == "simulated"
    assert cache.SIMULATION_FAILED not in second.details
    third = estimate_memory(req)  # the simulated one is cached: no third simulation
    assert len(calls) == 2 and third.device_total_bytes == second.device_total_bytes


@pytest.mark.cold_cache
def test_the_custom_code_fallback_is_cached(monkeypatch):
    from cheaptune.estimate.memory import compute

    cfg = {"model_type": "nosuch_custom_arch", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 256}
    req = EstimateRequest(model=cfg, method="lora", micro_batch=1, seq_len=32)
    first = estimate_memory(req)
    assert first.basis == "analytic" and first.details["why_analytic"] == compute.CUSTOM_CODE
    assert cache.SIMULATION_FAILED not in first.details
    monkeypatch.setattr(compute, "compute", lambda *a: pytest.fail("a cached estimate was computed again"))
    assert estimate_memory(req).device_total_bytes == first.device_total_bytes


@pytest.mark.cold_cache
def test_a_plan_fit_on_the_analytic_fallback_is_not_stored():
    from cheaptune.plan.candidates import FitOutcome
    from cheaptune.plan.sources import _cached

    outcomes = iter([FitOutcome(True, 1, basis="analytic"), FitOutcome(True, 2, basis="simulated")])
    assert _cached("p1-fallback-key", lambda: next(outcomes)).micro_batch == 1
    assert _cached("p1-fallback-key", lambda: next(outcomes)).micro_batch == 2  # computed again
    assert _cached("p1-fallback-key", lambda: pytest.fail("a simulated fit was not stored")).micro_batch == 2


def test_the_cache_key_follows_the_simulators_code(tmp_path, monkeypatch):
    """An upgraded or edited simulator re-simulates: its code and data are part of the key, so an estimate written
    by other code (here: a changed profiles.yaml or a changed module) is not served."""
    import shutil
    from pathlib import Path

    root = Path(cache.__file__).parents[1]
    copy = tmp_path / "estimate"
    shutil.copytree(root / "memory", copy / "memory", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "data", copy / "data")
    shutil.copy(root / "policy.py", copy / "policy.py")
    monkeypatch.setattr(cache, "__file__", str(copy / "memory" / "cache.py"))
    digests = []
    for edit in (None, copy / "data" / "profiles.yaml", copy / "memory" / "simulate.py"):
        if edit is not None:
            edit.write_text(edit.read_text() + "\n# edited\n")
        cache.code_digest.cache_clear()
        digests.append(cache.key({"model": "m"}, {"hidden_size": 8}))
    cache.code_digest.cache_clear()
    assert len(set(digests)) == 3
