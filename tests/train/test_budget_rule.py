"""`train --plan`: of the plan's budget and the config file's, the lower holds; --budget wins over both
(train.planmerge.run_budget, the rule `launch` follows too: tests/launch/test_budget_rule.py)."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput
from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, TrainSettings, load, save
from cheaptune.train.config import build
from cheaptune.train.planmerge import run_budget


@pytest.fixture
def plan(tmp_path):
    """An L4 plan predicted at $3.00 with a $4 budget (the figures are the test's own)."""
    p = PlanFile(
        created="2026-12-02T00:00:00", cheaptune_version="0.1.0", model="some/model", dataset="d.jsonl",
        train=TrainSettings(method="lora", precision="bf16-mixed"), offer=Offer(provider="x", gpu="L4", price_per_hour=0.7),
        prediction=Prediction(peak_vram_bytes=10**9, gpu_memory_bytes=24 * 10**9, tokens=10**6, tokens_per_s=1000,
                              hours=4.0, cost=CostBreakdown(compute=2.8, total=3.0)),
        budget_usd=4.0,
    )
    save(p, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


@pytest.mark.parametrize(("own", "flag", "runs_at", "plans"), [
    (50.0, None, 4.0, True),   # a larger cap in the file does not lift the plan's (it ran at $50 before)
    (2.5, None, 2.5, False),   # a smaller one holds
    (None, None, 4.0, True),   # none: the plan's
    (2.5, 10.0, 10.0, False),  # the flag wins over both
])
def test_the_lower_of_the_plans_and_the_configs_cap_unless_a_flag_says(plan, tmp_path, own, flag, runs_at, plans):
    config = tmp_path / "c.yaml"
    config.write_text("method: lora\n" if own is None else f"budget_usd: {own}\n")
    cfg = build(config, plan, {"budget_usd": flag})
    assert cfg.budget_usd == runs_at and cfg._plan_budgeted is plans


def test_a_config_cap_over_the_plans_does_not_start_a_plan_over_its_budget(plan, tmp_path, run_cli):
    """A $2 plan budget under the $3 prediction refuses with exit 3 before the (missing) model loads, a config
    asking for $50 notwithstanding (the config's $50 won before, and the run started)."""
    low = load(plan).model_copy(update={"budget_usd": 2.0})
    save(low, plan)
    config = tmp_path / "c.yaml"
    config.write_text("budget_usd: 50\n")
    code, _, err = run_cli("train", str(config), "--plan", str(plan), "-o", str(tmp_path / "o"))
    assert code == 3 and "$3.00" in err and "$2.00" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("bad", [".nan", "lots", "-1", "true"])
def test_a_config_cap_that_is_no_positive_number_is_refused_not_min_d_away(plan, tmp_path, bad):
    """min() would drop a NaN (min(4, nan) is 4) or let a string raise a TypeError: the rule hands such a value on
    to the config's validation, which says it in one line."""
    config = tmp_path / "c.yaml"
    config.write_text(f"budget_usd: {bad}\n")
    with pytest.raises(BadInput, match="budget_usd"):
        build(config, plan, {})


def test_the_rule_alone():
    assert run_budget(4.0, 2.0) == 2.0 and run_budget(4.0, 9.0) == 4.0 and run_budget(None, 9.0) == 9.0
    assert run_budget(4.0, 2.0, flag=7.0) == 7.0 and run_budget(None, None) is None
