"""Planned against billed rate: the line, the re-projection, the event, and where report and ui show them."""

from __future__ import annotations

import pytest

from cheaptune.runs.billed import EVENT, BilledRate, latest
from cheaptune.runs.registry import Registry
from cheaptune.runs.report import summarize


def test_over_five_percent_is_said_with_a_fresh_projection():
    rate = BilledRate(planned=0.69, billed=0.90, source="scripted")
    assert rate.over and not BilledRate(1.0, 1.05, "x").over and BilledRate(1.0, 1.051, "x").over
    assert rate.projected(3.0) == pytest.approx(3.0 * 0.90 / 0.69)
    assert "30% above the plan's $0.6900/h" in rate.line(3.0, 20.0) and "within the $20.00 budget" in rate.line(3.0, 20.0)
    assert "over the $3.50 budget: the cap stops it at $3.50" in rate.line(3.0, 3.5)
    assert rate.detail(3.0, None)["projected_usd"] == pytest.approx(rate.projected(3.0))


def test_report_and_ui_show_planned_and_billed_side_by_side():
    from cheaptune.ui.views import run_page

    reg = Registry()
    run = reg.start_run(name="r", model="m", method="lora", price_per_hour=0.69)
    same = Registry().get_run(run.id)
    assert (summarize(same)["planned_per_hour"], summarize(same)["billed_per_hour"]) == (0.69, 0.69)
    assert latest(same) is None
    run.event(EVENT, BilledRate(0.69, 0.90, "scripted").detail(3.0, 20.0))
    record = Registry().get_run(run.id)
    assert (summarize(record)["planned_per_hour"], summarize(record)["billed_per_hour"]) == (0.69, 0.90)
    assert dict(run_page(record)["facts"])["price"] == "$0.69/h planned, $0.90/h billed"


def test_train_plan_meters_the_billed_rate_and_reprojects_against_the_budget(tmp_path):
    from cheaptune.plan.planfile import save
    from cheaptune.runs.billed import against_plan
    from cheaptune.train.config import build
    from tests.launch.conftest import make_plan, offer

    plan = tmp_path / "plan.yaml"
    save(make_plan(offer("runpod", "RTX4090", 0.69, total=3.0), total=3.0, budget=20.0), plan)
    cfg, line = against_plan(build(None, plan, {"price_per_hour": 0.90}), plan)
    assert line.startswith("warning: billed rate $0.9000/h is 30% above the plan's $0.6900/h")
    assert cfg.price_per_hour == 0.90 and cfg.predicted_cost_usd == pytest.approx(3.0 * 0.90 / 0.69)
    assert cfg._billed["over"] and cfg._billed["projected_usd"] == pytest.approx(3.0 * 0.90 / 0.69)
    same, none = against_plan(build(None, plan, {"price_per_hour": 0.72}), plan)  # within 5%: unchanged
    assert none is None and same.predicted_cost_usd == 3.0 and same._billed is None
