"""The spend ledger beside the checkpoints and the guard's refusal to start a resumed segment that cannot
afford one more step (the provider's billing minimum charged at each start included)."""

from cheaptune.runs import ledger
from cheaptune.runs.guard import GuardCallback, GuardSettings
from cheaptune.runs.registry import Registry
from tests.runs.fakeloop import FakeClock, run_loop
from tests.runs.test_guard import RecordingAlerter


def _guard(run, spend, budget=100.0):
    # $1/s, billed per minute with a 60 s minimum at each start; steps of 10 s, checkpoints of 3 s.
    s = GuardSettings(price_per_hour=3600.0, budget_usd=budget, billing_unit_s=1, min_billed_s=60, checkpoint_s=3.0,
                      force=True, spend_file=str(spend))
    return GuardCallback(s, run, clock=FakeClock(), alerter=RecordingAlerter())


def test_a_resumed_segment_starts_from_the_spend_and_refuses_what_it_cannot_afford(tmp_path):
    spend, registry = tmp_path / "ckpt" / ledger.FILE, Registry()
    run = registry.start_run(name="r", price_per_hour=3600.0, budget_usd=100.0)
    first = _guard(run, spend)
    assert first.start_refusal() is None  # nothing billed yet
    run_loop(first, first.clock, max_steps=100, step_s=10, save_s=3)
    spent = registry.get_run(run.id)["cost_actual_usd"]
    assert first.stop_reason == "budget" and 85 <= spent <= 100
    assert ledger.prior(spend, "another:0").usd == spent  # the ledger holds what the registry holds
    assert ledger.prior(spend, f"{run.id}:0").usd == 0.0  # a segment never counts itself

    # Resumed: one 10 s step + 3 s checkpoint is billed as the 60 s minimum, $60 more: it does not start.
    resumed = registry.resume_run(run.id)
    why = _guard(resumed, spend).start_refusal()
    assert why is not None and "not started" in why and f"${spent:.2f}" in why and "$100.00" in why
    # With room for the minimum it starts, from the spend so far.
    roomy = _guard(registry.resume_run(run.id), spend, budget=spent + 61)
    assert roomy.start_refusal() is None and roomy.meter.prior_usd == spent

    # A fresh machine: another registry with no record of the run; the ledger alone carries the spend.
    elsewhere = Registry(tmp_path / "other.db").start_run(name="r", price_per_hour=3600.0, budget_usd=100.0)
    assert _guard(elsewhere, spend).start_refusal() is not None
