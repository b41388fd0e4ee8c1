import logging

import pytest

from cheaptune.errors import BadInput
from cheaptune.runs.alerts import Alerter
from cheaptune.runs.guard import GuardCallback, GuardSettings
from cheaptune.runs.registry import Registry
from tests.runs.fakeloop import FakeClock, run_loop


class RecordingAlerter(Alerter):
    def __init__(self):
        super().__init__()
        self.sent = []

    def send(self, kind, message, payload=None):
        self.sent.append((kind, message))


def make(settings, run=None):
    clock, alerter = FakeClock(), RecordingAlerter()
    return GuardCallback(settings, run, clock=clock, alerter=alerter), clock, alerter


def test_budget_cap_stops_with_checkpoint_and_bounded_overshoot():
    # $3600/h = $1/s; 10 s steps = $10 a step; checkpoint 3 s = $3.
    s = GuardSettings(price_per_hour=3600.0, budget_usd=95.0, checkpoint_s=3.0, force=True)
    cb, clock, alerter = make(s)
    state, control, saves = run_loop(cb, clock, max_steps=100, step_s=10, save_s=3)
    assert cb.stop_reason == "budget"
    assert control.should_training_stop and saves == [state.global_step]
    final = cb.cost_usd
    assert final <= 95.0 + 10.0  # the cap is passed by less than one step's cost, checkpoint included
    assert final > 95.0 - 2 * (10.0 + 3.0)  # it did not stop absurdly early
    kinds = [k for k, _ in alerter.sent]
    assert kinds.count("budget_threshold") == 2  # 50% and 80%; the stop came before 100%
    assert "stop" in kinds and "projection" in kinds


def test_overshoot_bound_holds_when_steps_slow_down():
    s = GuardSettings(price_per_hour=3600.0, budget_usd=100.0, checkpoint_s=3.0, force=True)
    cb, clock, _ = make(s)
    args_steps = iter([5.0] * 15 + [40.0] * 100)
    # Steps take 5 s, then suddenly 40 s: the last step can overshoot, but by less than one step + checkpoint.
    orig = clock.advance
    clock.advance = lambda sec: orig(next(args_steps) if sec == 10.0 else sec)
    run_loop(cb, clock, max_steps=100, step_s=10.0, save_s=3.0)
    assert cb.stop_reason == "budget"
    assert cb.cost_usd < 100.0 + 40.0 + 3.0


def test_thresholds_fire_once_across_resume():
    reg = Registry()
    run = reg.start_run(name="t", price_per_hour=3600.0)
    s = GuardSettings(price_per_hour=3600.0, budget_usd=1000.0, alert_thresholds=(0.05, 0.1, 0.5))
    cb, clock, alerter = make(s, run)
    run_loop(cb, clock, max_steps=8, step_s=10)  # $80: crosses 5%
    assert [k for k, _ in alerter.sent] == ["budget_threshold"]
    run.finish("preempted")
    run2 = reg.resume_run(run.id)
    assert run2.prior_cost_usd() == pytest.approx(80.0)
    cb2, clock2, alerter2 = make(s, run2)
    run_loop(cb2, clock2, max_steps=10, step_s=10, start_step=8)  # +$20: total $100 crosses 10% only
    assert [m for _, m in alerter2.sent] == [m for _, m in alerter2.sent if "10%" in m]
    assert len(alerter2.sent) == 1
    rec = reg.get_run(run.id)
    assert rec["cost_actual_usd"] == pytest.approx(100.0)
    assert [seg["cost_usd"] for seg in rec["segments"]] == pytest.approx([80.0, 20.0])
    assert sum(e["kind"] == "budget_threshold" for e in rec["events"]) == 2
    assert rec["series"] and rec["series"][-1]["step"] == 10


def test_max_hours_stops():
    s = GuardSettings(max_hours=0.01, checkpoint_s=0)  # 36 s
    cb, clock, _ = make(s)
    state, _, saves = run_loop(cb, clock, max_steps=100, step_s=10, save_s=0)
    assert cb.stop_reason == "max_hours" and saves and state.global_step <= 3
    assert cb.cost_usd is None


def test_billing_unit_uses_the_paid_hour():
    # Hourly billing: the first step already bills a whole hour; the cap lets the run use it.
    s = GuardSettings(price_per_hour=2.0, billing_unit_s=3600, budget_usd=2.0, force=True)
    cb, clock, _ = make(s)
    state, _, _ = run_loop(cb, clock, max_steps=1000, step_s=10, save_s=3)
    assert cb.stop_reason == "budget"
    assert cb.cost_usd == pytest.approx(2.0)
    assert 340 <= state.global_step < 360


def test_log_gets_cost_figures_for_report_to():
    s = GuardSettings(price_per_hour=36.0, budget_usd=50.0)
    cb, clock, _ = make(s)
    logs = {}
    run_loop(cb, clock, max_steps=10, step_s=10, log_every=5)
    from transformers import TrainerControl, TrainerState, TrainingArguments
    cb.on_log(TrainingArguments(output_dir="/tmp/x", report_to=[]), TrainerState(), TrainerControl(), logs=logs)
    assert logs["cost_usd"] == pytest.approx(1.0)  # 100 s at $36/h
    assert logs["budget_used"] == pytest.approx(0.02)
    assert "cost_projected_usd" in logs and "data_wait_frac" in logs
    assert cb.progress_text().startswith("$1.00 of $50.00")


def test_starvation_warns_once(caplog):
    cb, clock, _ = make(GuardSettings())
    with caplog.at_level(logging.WARNING, logger="cheaptune.runs"):
        run_loop(cb, clock, max_steps=30, step_s=1.0, data_s=0.5)
    warnings = [r for r in caplog.records if "waits for data" in r.getMessage()]
    assert len(warnings) == 1 and "pre-tokenise" in warnings[0].getMessage()
    assert "GPU" not in warnings[0].getMessage()  # said on CPU runs too (and on the run page)
    assert cb.starvation.wait_fraction == pytest.approx(1 / 3, rel=0.05)


def test_no_starvation_warning_when_data_is_fast(caplog):
    cb, clock, _ = make(GuardSettings())
    with caplog.at_level(logging.WARNING, logger="cheaptune.runs"):
        run_loop(cb, clock, max_steps=30, step_s=1.0, data_s=0.05)
    assert not [r for r in caplog.records if "waits for data" in r.getMessage()]


def test_idle_watchdog_alerts_and_stops():
    s = GuardSettings(idle_minutes=1, idle_stop=True)
    cb, clock, alerter = make(s)
    hung = []
    cb.on_hung = lambda: hung.append(True)
    from transformers import TrainerControl, TrainerState, TrainingArguments
    args, state, control = TrainingArguments(output_dir="/tmp/x", report_to=[]), TrainerState(), TrainerControl()
    state.max_steps = 10
    cb.on_train_begin(args, state, control)
    try:
        clock.advance(30)
        cb.idle.check()
        assert not alerter.sent
        clock.advance(31)
        cb.idle.check()
        assert [k for k, _ in alerter.sent] == ["idle"]
        cb.on_step_begin(args, state, control)  # the loop comes back: checkpoint and stop
        assert control.should_save and control.should_training_stop and cb.stop_reason == "idle"
        clock.advance(61)
        cb.idle.check()
        assert hung == [True]
    finally:
        cb.idle.stop()


def test_bad_settings_are_one_line_badinput():
    with pytest.raises(BadInput, match="--budget needs a price"):
        GuardSettings(budget_usd=5)
    with pytest.raises(BadInput, match="argument list"):
        GuardSettings(on_finish="stop", shutdown_command="shutdown -h now")
    with pytest.raises(BadInput, match="on-finish"):
        GuardSettings(on_finish="explode")


def test_projection_over_budget_stops_early_and_says_it_is_a_projection():
    # 200000 steps of 1 s at $36/h = $2000 projected against $0.10: stop after the first steps, not at the cap.
    s = GuardSettings(price_per_hour=36.0, budget_usd=0.10, checkpoint_s=1.0, reproject_after_steps=3)
    cb, clock, _ = make(s)
    state, control, saves = run_loop(cb, clock, max_steps=200000, step_s=1.0, save_s=1.0)
    assert cb.stop_reason == "projection" and state.global_step == 3 and saves == [3]
    message = cb.stop_message
    assert "projection" in message and "$0.1000 budget" in message and "$2,000" in message
    # the cheapest change that fits: as many steps as the rest of the budget buys (1 s = $0.01 each)
    fit = int(message.split("--max-steps ")[1].split()[0])
    assert 7 <= fit <= 9
    assert "--force" in message and "--resume" not in message


def test_forced_projection_trains_on_to_the_cap():
    s = GuardSettings(price_per_hour=36.0, budget_usd=0.10, checkpoint_s=1.0, reproject_after_steps=3, force=True)
    cb, clock, alerter = make(s)
    state, _, saves = run_loop(cb, clock, max_steps=200000, step_s=1.0, save_s=1.0)
    assert cb.stop_reason == "budget" and saves == [state.global_step]
    assert 0.10 - 0.02 <= cb.cost_usd <= 0.10 + 0.01  # within one step ($0.01) of the cap
    assert "projection" in [k for k, _ in alerter.sent]
    assert "stopped before the budget cap" in cb.stop_message and f"${cb.cost_usd:.4f} of $0.1000" in cb.stop_message
    assert "--budget" in cb.stop_message


def test_a_budget_stop_says_the_next_step_would_pass_the_cap():
    # $1/s, 10 s steps + 3 s checkpoint: stops when the next step and its save would bill over $100
    cb, clock, _ = make(GuardSettings(price_per_hour=3600.0, budget_usd=100.0, checkpoint_s=3.0, force=True))
    run_loop(cb, clock, max_steps=100, step_s=10, save_s=3)
    assert cb.stop_reason == "budget"
    message = cb.stop_message
    assert "stopped before the budget cap" in message and "stopped at the budget cap" not in message
    billed = float(message.split("the bill would be $")[1].split(";")[0])
    assert billed > 100.0 > cb.cost_usd  # what it would have billed passes the cap; what it spent does not
    assert "(~13 s)" in message


def test_thresholds_fire_in_order_on_a_resumed_run():
    reg = Registry()
    run = reg.start_run(name="t", price_per_hour=3600.0)
    s = GuardSettings(price_per_hour=3600.0, budget_usd=100.0, alert_thresholds=(0.8, 0.5), checkpoint_s=0.0)
    cb, clock, alerter = make(s, run)
    run_loop(cb, clock, max_steps=4, step_s=10)  # $40: below both
    assert alerter.sent == []
    run.finish("preempted")
    cb2, clock2, alerter2 = make(s, reg.resume_run(run.id))
    cb2.on_train_begin(None, type("S", (), {"global_step": 4, "max_steps": 10})(), None)
    clock2.advance(45)  # a slow first step: $85 spent, past both thresholds at once
    cb2._threshold_alert(0.8)  # the 80% timer fires first (before the step end checks 50%)
    assert [m.split()[0] for _, m in alerter2.sent] == ["50%", "80%"]


def test_the_meter_starts_when_the_process_started():
    clock = FakeClock()
    started = clock.t
    clock.advance(30)  # imports, model load, tokenising: billed on a rented machine
    cb = GuardCallback(GuardSettings(price_per_hour=3600.0), clock=clock, alerter=RecordingAlerter(), started_at=started)
    run_loop(cb, clock, max_steps=2, step_s=10, log_every=100)
    assert cb.cost_usd == pytest.approx(30 + 2 * 10)
    assert cb._step_s == pytest.approx(10)  # start-up is billed, not counted as a step's time


def test_projection_is_checked_again_every_n_minutes():
    # On pace at first (10 s steps, 100 steps, $1/s: $1000 < $1500); steps then slow to 30 s.
    s = GuardSettings(price_per_hour=3600.0, budget_usd=1500.0, checkpoint_s=0.0, reproject_after_steps=3,
                      reproject_minutes=2.0)
    cb, clock, _ = make(s)
    steps = iter([10.0] * 5 + [30.0] * 200)
    orig = clock.advance
    clock.advance = lambda sec: orig(next(steps) if sec == 10.0 else sec)
    state, _, _ = run_loop(cb, clock, max_steps=100, step_s=10.0, save_s=0.0)
    assert cb.stop_reason == "projection" and 5 < state.global_step < 40


def test_budget_alerts_fire_at_their_own_threshold_on_the_real_clock():
    import time

    # $360/h = $0.10 a second: 50% of $0.20 is reached 1 s after the start, 80% after 1.6 s.
    cb = GuardCallback(GuardSettings(price_per_hour=360.0, budget_usd=0.20), alerter=RecordingAlerter())
    from transformers import TrainerControl, TrainerState, TrainingArguments

    args, state = TrainingArguments(output_dir="/tmp/unused", report_to=[]), TrainerState()
    state.max_steps = 10
    cb.on_train_begin(args, state, TrainerControl())
    try:
        deadline = time.monotonic() + 10
        while not cb.alerter.sent and time.monotonic() < deadline:
            time.sleep(0.02)
        kind, message = cb.alerter.sent[0]
        assert kind == "budget_threshold" and message.startswith("50% of the $0.2000 budget")
        spent = float(message.split("($")[1].split()[0])
        assert 0.10 <= spent < 0.14  # fired when half the budget was spent, not later at the next step end
    finally:
        cb.on_train_end(args, state, TrainerControl())
