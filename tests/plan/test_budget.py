"""plan --budget USD --maximize epochs|tokens over the hand-made catalogs."""

from __future__ import annotations

import dataclasses

import pytest

from cheaptune.errors import BadInput, Infeasible
from cheaptune.plan.budget import plan_for_budget
from cheaptune.plan.planner import make_plan
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

W = Workload(tokens=20_000_000, epochs=1, seq_len=2048, effective_batch=16)


def run(c, w):
    return make_plan("test-7b", SHAPE_7B, 4096, w, c, GPUS, OFFERS, fake_fit())


def test_the_budget_buys_the_most_epochs_and_the_plan_stays_within_it():
    one_epoch = run(Constraints(), W).recommended.total
    budget = one_epoch * 3.5
    r = plan_for_budget(run, Constraints(budget_usd=budget), W, "epochs", SHAPE_7B)
    assert 3.5 < r.workload.epochs < 4.5  # start-up is paid once, so 3.5x one epoch's cost buys more than 3.5
    assert r.recommended.total <= budget
    more = run(Constraints(), dataclasses.replace(W, epochs=r.workload.epochs + 0.05)).recommended.total
    assert more > budget * 0.99  # a twentieth of an epoch more would (nearly) pass the budget
    assert r.notes[0].startswith(f"--budget {budget:g} buys {r.workload.epochs:g} epochs")


def test_tokens_caps_at_the_whole_dataset_and_shrinks_the_share_under_a_small_budget():
    whole = run(Constraints(), W).recommended.total
    r = plan_for_budget(run, Constraints(budget_usd=whole * 10), W, "tokens", SHAPE_7B)
    assert r.workload.tokens == W.tokens and "the whole dataset" in r.notes[0]
    r = plan_for_budget(run, Constraints(budget_usd=whole / 3), W, "tokens", SHAPE_7B)
    assert r.workload.tokens < W.tokens / 2 and "% of the data" in r.notes[0] and r.recommended.total <= whole / 3


def test_a_budget_below_the_fixed_costs_buys_nothing_and_says_what_would():
    with pytest.raises(Infeasible, match="buys no training") as err:
        plan_for_budget(run, Constraints(budget_usd=0.0001), W, "epochs", SHAPE_7B)
    assert err.value.result.advice[0].startswith("raise the budget above $")


@pytest.mark.parametrize("c, what, needle", [(Constraints(), "epochs", "needs --budget"),
                                             (Constraints(budget_usd=5), "loss", "--maximize must be one of")])
def test_bad_maximize_is_one_line(c, what, needle):
    with pytest.raises(BadInput, match=needle):
        plan_for_budget(run, c, W, what, SHAPE_7B)
