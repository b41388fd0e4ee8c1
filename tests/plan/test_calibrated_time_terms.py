"""Whole-job time: every term (start-up, training, checkpoints, the end) shown with its source, summing to the hours."""

from __future__ import annotations

import pytest

from cheaptune.estimate.cost.cost import SECONDS_PER_HOUR
from tests.plan.test_planner import plan


def test_every_term_has_seconds_and_a_source_and_they_sum_to_the_hours():
    for o in plan().options:
        terms = o.details["time_terms"]
        assert set(terms["startup"]) == {"provision", "install", "download", "load", "tokenize"}
        assert set(terms["end"]) == {"final_save", "upload"}
        for t in (*terms["startup"].values(), *terms["end"].values(), terms["training"], terms["checkpoints"]):
            assert t["source"] and t["s"] >= 0
        spot = (o.details["spot"] or {}).get("expected_extra_s", 0.0)  # checkpoints and lost work, on spot
        wall = (sum(t["s"] for t in terms["startup"].values()) + terms["training"]["s"] + spot
                + sum(t["s"] for t in terms["end"].values()))
        assert wall / SECONDS_PER_HOUR == pytest.approx(o.hours, abs=2e-3)
        assert (terms["checkpoints"]["saves"] > 0) == bool(o.spot and terms["training"]["s"] > o.details["spot"]["interval_s"])


def test_the_download_uses_the_listings_bandwidth_where_it_states_one():
    from types import SimpleNamespace

    from cheaptune.estimate.cost.cost import constants
    from cheaptune.plan.pricing import download_rate

    fast = SimpleNamespace(listing={"inet_down_mbps": 8000.0})
    assert download_rate(fast, constants()) == (1e9, "the listing's measured 8000 Mbit/s down")
    assert download_rate(SimpleNamespace(listing=None), constants())[0] == constants()["download_bytes_per_s"]


def test_an_adapter_plan_says_what_the_same_job_costs_with_unsloth():
    from cheaptune.plan.workload import Constraints

    r = plan(Constraints(methods=("qlora",)))
    line = next(n for n in r.notes if n.startswith("with unsloth instead of cheaptune's HF stack"))
    assert "stacks.unsloth" in line and "memory not re-estimated" in line and "p90 $" in line
