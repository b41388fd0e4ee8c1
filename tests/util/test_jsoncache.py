"""The shared JSON cache: computed once, read back, not kept when told so, recomputed over a bad file; and the
three caches that use it keep their keys (a warm cache from before stays warm)."""

from __future__ import annotations

import hashlib
import json

import pytest

from cheaptune.util import jsoncache


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path))
    return tmp_path


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_computed_once_then_read_back(home):
    compute, calls = counting({"a": 1})
    assert jsoncache.cached("k", "x", compute) == {"a": 1}
    assert jsoncache.cached("k", "x", compute) == {"a": 1}
    assert len(calls) == 1 and json.loads((home / "cache" / "k" / "x.json").read_text()) == {"a": 1}


def test_a_value_keep_refuses_is_computed_every_time():
    compute, calls = counting(3)
    for _ in range(2):
        assert jsoncache.cached("k", "y", compute, keep=lambda v: v != 3) == 3
    assert len(calls) == 2 and jsoncache.load("k", "y") is None


@pytest.mark.parametrize("text", ["{not json", '"a string"', "[1, 2]"])
def test_a_file_that_does_not_decode_is_computed_again(text):
    jsoncache.path("k", "z").write_text(text)
    compute, calls = counting({"n": 5})
    out = jsoncache.cached("k", "z", compute, decode=lambda d: int(d["n"]))
    assert out == {"n": 5} and calls == [1] and jsoncache.load("k", "z") == {"n": 5}


def test_encode_and_decode_round_trip():
    value = jsoncache.cached("k", "w", lambda: 7, decode=lambda d: d["v"], encode=lambda v: {"v": v})
    assert value == 7 and jsoncache.load("k", "w") == {"v": 7}
    assert jsoncache.cached("k", "w", lambda: pytest.fail("recomputed"), decode=lambda d: d["v"]) == 7


def test_digest_is_the_key_the_caches_used_before():
    """sha256 of the sorted-keys JSON, first 32 hex digits, as estimate.memory.cache, plan.sources and
    catalog.models each computed it: entries written before the shared helper are still found."""
    inputs = {"b": [1, 2], "a": {"y": None, "x": 1.5}, "p": object.__name__}
    before = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:32]
    assert jsoncache.digest(inputs) == before
    assert jsoncache.digest({"a": 1, "b": 2}) == jsoncache.digest({"b": 2, "a": 1}) != jsoncache.digest({"a": 2})


def test_the_estimate_cache_keeps_no_fallback_after_a_failed_simulation():
    from cheaptune.estimate.memory import cache

    cache.store("k1", {"details": {cache.SIMULATION_FAILED: "x"}})
    cache.store("k2", {"details": {}})
    assert cache.load("k1") is None and cache.load("k2") == {"details": {}}


def test_the_fit_cache_keeps_no_analytic_fallback():
    from cheaptune.plan import sources
    from cheaptune.plan.candidates import FitOutcome

    analytic, simulated = FitOutcome(True, basis="analytic"), FitOutcome(True, micro_batch=4, basis="simulated")
    assert sources._cached("a", lambda: analytic) is analytic and not sources._fit_path("a").exists()
    assert sources._cached("s", lambda: simulated) == simulated
    assert sources._cached("s", lambda: pytest.fail("recomputed")) == simulated
