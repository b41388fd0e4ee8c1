"""Guard rails inside the HF Trainer: cost meter, budget and time caps, alerts, watchdogs, shutdown.

Trainer side, in order:

    settings = GuardSettings(price_per_hour=..., budget_usd=..., on_finish="stop", ...)
    check_budget(projected_usd, settings.budget_usd, force)   # cheaptune.runs.meter; Infeasible (exit 3)
    guard = GuardCallback(settings, run, clock=time.monotonic)  # run: RunHandle or None
    attach(trainer, guard)        # first in the callback list, so report_to sees the cost figures
    if (why := guard.start_refusal()):  # a resumed segment that cannot afford one more step does not start
        run.finish("budget-stopped", stop_reason="budget"); raise BudgetStop(why)
    trainer.train(resume_from_checkpoint=...)
    if guard.stop_reason:         # "budget" | "max_hours" | "idle": a checkpoint was saved
        run.finish("budget-stopped", stop_reason=guard.stop_reason); apply_on_finish(settings, "budget-stopped")
        raise BudgetStop(guard.stop_message)                    # exit 10
    run.finish("finished", ...); apply_on_finish(settings, "finished")   # and "failed" on an error

At a cap the callback sets control.should_save and control.should_training_stop at a step end, so the
Trainer saves a checkpoint and leaves its loop. It stops when the billed cost after one more step plus
a checkpoint would pass the budget, so the cap is passed by less than one step's cost even when steps
slow down. After `reproject_after_steps` steps (train: the probe) and every `reproject_minutes`, it
re-projects the run's total from the measured pace; a projection over the budget stops the run
(stop_reason "projection", with the figures and what would fit) unless `force`, which trains on to the
cap. Budget alerts fire at their own threshold of the money spent: a timer on the real clock, and a
check at every step end. `guard.status()` / `guard.progress_text()` give the figures for a progress bar;
on_log adds cost_usd, cost_projected_usd, budget_used and data_wait_frac to the logs (tensorboard,
wandb, mlflow). The callback writes progress to the run (throttled to settings.heartbeat_s) but never
calls run.finish: the trainer picks the final status.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable

from transformers import TrainerCallback

from cheaptune.runs import ledger
from cheaptune.runs.alerts import Alerter, webhook_from_env
from cheaptune.runs.meter import CostMeter, usd
from cheaptune.runs.settings import GuardSettings
from cheaptune.runs.shutdown import run_shutdown, shutdown_command
from cheaptune.runs.watchdog import IdleWatchdog, StarvationWatch

log = logging.getLogger("cheaptune.runs")

__all__ = ["GuardSettings", "GuardCallback", "apply_on_finish", "attach", "make_alerter"]

STOP_MESSAGES = {
    "budget": "stopped before the budget cap, after a checkpoint: one more step with its checkpoint would pass it",
    "projection": "stopped on a projection, before the cap, after a checkpoint",
    "max_hours": "stopped at --max-hours after a checkpoint",
    "idle": "stopped after no progress for the idle limit, after a checkpoint",
}
RESUME_ADVICE = {
    "budget": "to continue, run the same command with a larger --budget (it resumes from the checkpoint)",
    "projection": "to continue anyway, run the same command with --force (it resumes and trains on to the cap)",
    "max_hours": "to continue, run the same command with a larger --max-hours (it resumes from the checkpoint)",
    "idle": "run the same command again to resume from the checkpoint",
}


def make_alerter(settings: GuardSettings) -> Alerter:
    url, headers = webhook_from_env(settings.webhook_url, settings.webhook_headers)
    return Alerter(url, headers, settings.alert_command, timeout_s=settings.webhook_timeout_s,
                   retries=settings.webhook_retries)


def attach(trainer, guard: GuardCallback) -> None:
    """Put the guard first among the Trainer's callbacks: the report_to integrations then log what it adds."""
    trainer.callback_handler.callbacks.insert(0, guard)


class GuardCallback(TrainerCallback):
    """The guard rails as a TrainerCallback; `clock` (seconds, monotonic) is injectable for tests."""

    def __init__(self, settings: GuardSettings, run=None, clock: Callable[[], float] = time.monotonic,
                 alerter: Alerter | None = None, started_at: float | None = None) -> None:
        self.settings, self.run, self.clock = settings, run, clock
        self.started_at = started_at  # `clock` time the meter starts (train: the process start; else train begin)
        self.alerter = alerter or make_alerter(settings)
        # Resolve the shutdown command now, so a bad preset fails before any money is spent.
        self.shutdown = shutdown_command(settings.on_finish, settings.shutdown_preset, settings.shutdown_command)
        self.stop_reason: str | None = None
        self.starvation = StarvationWatch(settings.starvation_threshold)
        self.idle: IdleWatchdog | None = None
        self.on_hung: Callable[[], None] = _sigterm_self
        self.meter = CostMeter(settings.price_per_hour or 0.0, settings.billing_unit_s, settings.min_billed_s)
        self._prior_s = 0.0
        self._prior: ledger.Prior | None = None
        self._t_end: float | None = None
        self._t0 = self._mark = self._step_start = self._last_end = self._first_end = self._begin = None
        self._next_bill: tuple[float, float] | None = None  # (seconds, billed $) of the step a budget stop skipped
        self._start_step = self._step = self._max_steps = 0
        self._step_s = self._wait = 0.0
        self._save_s: float | None = None
        self._last_write = float("-inf")
        self._fired: set[str] = set()
        self._idle_pending = False
        self._next_projection: float | None = None
        self.projection_text = ""
        self._lock = threading.Lock()
        self._order = threading.Lock()  # threshold alerts go out one batch at a time, lowest first
        self._timers: list[threading.Timer] = []

    # ---- figures ----
    @property
    def elapsed_s(self) -> float:
        if self._t0 is None:
            return 0.0
        return (self._t_end if self._t_end is not None else self.clock()) - self._t0

    @property
    def total_elapsed_s(self) -> float:
        """Metered seconds over every segment of the run (earlier ones from the registry or the ledger)."""
        return self._prior_s + self.elapsed_s

    @property
    def cost_usd(self) -> float | None:
        """Billed cost of the run so far (earlier segments included); None without a price."""
        return None if self.settings.price_per_hour is None else self.meter.billed(self.elapsed_s)

    @property
    def eta_s(self) -> float | None:
        done = self._step - self._start_step
        if self._first_end is None or done < 2 or not self._max_steps:
            return None
        pace = (self.clock() - self._first_end) / (done - 1)
        return max(self._max_steps - self._step, 0) * pace

    @property
    def projected_usd(self) -> float | None:
        """Billed run total at the ETA at this segment's measured pace."""
        eta = self.eta_s
        if eta is None or self.settings.price_per_hour is None:
            return None
        return self.meter.billed(self.elapsed_s + eta)

    @property
    def stop_message(self) -> str:
        reason = self.stop_reason or ""
        if reason == "projection":
            return f"{STOP_MESSAGES[reason]}: {self.projection_text}; {RESUME_ADVICE[reason]}"
        cost, budget = self.cost_usd, self.settings.budget_usd
        spent = "" if cost is None else f" ({usd(cost)}{f' of {usd(budget)}' if budget else ''} spent)"
        if reason == "budget" and self._next_bill is not None:
            secs, billed = self._next_bill
            spent += f"; with one more step and its checkpoint (~{secs:.3g} s) the bill would be {usd(billed)}"
        return STOP_MESSAGES.get(reason, "not stopped") + spent + (f"; {RESUME_ADVICE[reason]}" if reason else "")

    def status(self) -> dict:
        """Figures for a progress bar: cost_usd, projected_usd, budget_usd, budget_used, eta_s, data_wait_frac."""
        cost, budget = self.cost_usd, self.settings.budget_usd
        return {
            "cost_usd": cost, "projected_usd": self.projected_usd, "budget_usd": budget,
            "budget_used": cost / budget if cost is not None and budget else None, "eta_s": self.eta_s,
            "data_wait_frac": self.starvation.wait_fraction, "stop_reason": self.stop_reason,
        }

    def progress_text(self) -> str:
        """E.g. '$1.23 of $10.00, ~$4.56 at ETA' ('' without a price)."""
        s = self.status()
        if s["cost_usd"] is None:
            return ""
        text = usd(s["cost_usd"]) + (f" of {usd(s['budget_usd'])}" if s["budget_usd"] else "")
        return text + (f", ~{usd(s['projected_usd'])} at ETA" if s["projected_usd"] is not None else "")

    def _load_prior(self) -> None:
        """What earlier segments billed: the registry's record, or the ledger beside the checkpoints when
        that says more (a fresh machine's registry has none of it)."""
        if self._prior is not None:
            return
        usd_, secs = (self.run.prior_cost_usd(), self.run.prior_elapsed_s()) if self.run else (0.0, 0.0)
        self._prior = ledger.Prior()
        if self.settings.spend_file:
            self._prior = ledger.prior(self.settings.spend_file, self._ledger_key)
            usd_, secs = max(usd_, self._prior.usd), max(secs, self._prior.elapsed_s)
        self._prior_s = secs
        self.meter = CostMeter(self.meter.price_per_hour, self.meter.billing_unit_s, self.meter.min_billed_s, usd_)

    @property
    def _ledger_key(self) -> str:
        return f"{self.run.id}:{self.run.segment}" if self.run else "unrecorded"

    def start_refusal(self) -> str | None:
        """Before a resumed segment's first step: why it must not start, when what earlier segments billed
        plus one step and a checkpoint (billed in the provider's unit and minimum) would pass the budget;
        None when it may start. Each resume would otherwise pass the cap by one more step."""
        self._load_prior()
        s, prior = self.settings, self.meter.prior_usd
        if not (s.budget_usd and s.price_per_hour is not None and prior > 0):
            return None
        known = self._prior or ledger.Prior()
        step = (known.step_s or 0.0) + (known.save_s or self.save_s)
        if self.meter.billed(step) <= s.budget_usd:
            return None
        self.stop_reason = "budget"
        return (f"not started: earlier runs of this output billed {usd(prior)} of the {usd(s.budget_usd)} budget, "
                f"and one more step with its checkpoint (~{step:.3g} s) would bill {usd(self.meter.billed(step))}; "
                f"{RESUME_ADVICE['budget']}")

    # ---- TrainerCallback hooks ----
    def on_train_begin(self, args, state, control, **kwargs):
        if self._t0 is not None:  # the same process goes on (an out-of-memory fallback): billing continues
            self._max_steps, self._t_end = state.max_steps, None
            return control
        self._load_prior()
        self._begin = self._mark = self.clock()
        self._t0 = self._begin if self.started_at is None else min(self.started_at, self._begin)  # start-up is billed
        self._start_step = self._step = state.global_step
        self._max_steps = state.max_steps
        if self.settings.idle_minutes:
            self.idle = IdleWatchdog(self.settings.idle_minutes * 60, self._on_idle, self._hung, self.clock).start()
        if self.clock is time.monotonic:  # timers follow the real clock only (tests drive a fake one)
            self._schedule_thresholds()
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        now = self.clock()
        self._wait = now - self._mark if self._mark is not None else 0.0
        self._step_start = now
        self._check_idle_stop(control)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()
        self._step = state.global_step
        if self._step_start is not None:
            warning = self.starvation.add(self._wait, now - self._step_start)
            if warning:
                self._alert("starvation", warning, once=None, level_only=True)
        cycle = now - (self._last_end if self._last_end is not None else self._begin)
        self._step_s = cycle if self._last_end is None else max(cycle, 0.8 * self._step_s + 0.2 * cycle)
        self._last_end = self._mark = now
        if self._first_end is None:
            self._first_end = now
        if self.idle:
            self.idle.progress()
        self._check_money(control)
        self._check_idle_stop(control)
        self._persist(force=self.stop_reason is not None)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._mark = self.clock()
        if logs is not None:
            figures = self.status()
            for key in ("cost_usd", "projected_usd", "budget_used", "data_wait_frac"):
                if figures[key] is not None:
                    logs["cost_projected_usd" if key == "projected_usd" else key] = float(figures[key])
            if self.run:
                loss, eval_loss = logs.get("loss"), logs.get("eval_loss")
                self.run.record_point(state.global_step, loss=loss, eval_loss=eval_loss)
                fields = {k: v for k, v in (("train_loss", loss), ("eval_loss", eval_loss)) if v is not None}
                if fields:
                    self.run.update(**fields)
        self._check_idle_stop(control)
        return control

    def on_evaluate(self, args, state, control, **kwargs):
        self._mark = self.clock()
        if self.idle:
            self.idle.progress()
        return control

    def on_save(self, args, state, control, **kwargs):
        now = self.clock()
        if self._last_end is not None:
            self._save_s = max(self._save_s or 0.0, now - self._last_end)  # checkpoint (+ any eval) after the step
        self._mark = now
        if self.idle:
            self.idle.progress()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._t_end = self.clock()  # billing as recorded stops here: the stop message shows the registry's figure
        for timer in self._timers:
            timer.cancel()
        if self.idle:
            self.idle.stop()
        self._step = state.global_step
        self._persist(force=True)
        self.alerter.join()
        return control

    # ---- internals ----
    @property
    def save_s(self) -> float:
        """The measured checkpoint time, or the assumed one before the first save."""
        return self.settings.checkpoint_s if self._save_s is None else self._save_s

    def _check_money(self, control) -> None:
        s, elapsed = self.settings, self.elapsed_s
        lookahead = self._step_s + self.save_s
        if s.budget_usd and s.price_per_hour is not None:
            reached = [t for t in s.alert_thresholds if self.meter.accrued(elapsed) >= t * s.budget_usd]
            if reached:
                self._threshold_alert(max(reached))
            self._check_projection(control)
            if self.meter.billed(elapsed + lookahead) > s.budget_usd:
                if self.stop_reason is None:
                    self._next_bill = (lookahead, self.meter.billed(elapsed + lookahead))
                self._stop(control, "budget")
        if s.max_hours and self._prior_s + elapsed + lookahead > s.max_hours * 3600:
            self._stop(control, "max_hours")

    def _threshold_alert(self, t: float) -> None:
        """The alert for `t` and, first, those of every lower threshold not yet sent: in order, whichever of a
        timer or a step end gets there first (a resumed run past 50% must not say 80% before 50%)."""
        budget = self.settings.budget_usd or 0.0
        spent = self.meter.accrued(self.elapsed_s)
        with self._order:
            for low in sorted(x for x in self.settings.alert_thresholds if x <= t):
                self._alert("budget_threshold", f"{low:.0%} of the {usd(budget)} budget used ({usd(spent)} spent)",
                            once=f"budget:{low:g}")

    def _schedule_thresholds(self) -> None:
        """One timer per threshold not yet reached, at the moment the money spent reaches it."""
        s = self.settings
        if not (s.budget_usd and s.price_per_hour):
            return
        for t in s.alert_thresholds:
            delay = (t * s.budget_usd - self.meter.accrued(self.elapsed_s)) / s.price_per_hour * 3600
            if delay > 0:
                timer = threading.Timer(delay, self._threshold_alert, args=(t,))
                timer.daemon = True
                timer.start()
                self._timers.append(timer)

    def _check_projection(self, control) -> None:
        """After the first steps and every reproject_minutes: stop (or, forced, warn) when the measured
        pace projects a total over the budget."""
        s, now = self.settings, self.clock()
        if self._step - self._start_step < max(s.reproject_after_steps, 2) or self.stop_reason:
            return
        if self._next_projection is not None and now < self._next_projection:
            return
        self._next_projection = now + s.reproject_minutes * 60
        projected, eta = self.projected_usd, self.eta_s
        if projected is None or eta is None or projected <= (s.budget_usd or math.inf):
            return
        self.projection_text = self._projection_figures(projected, eta)
        if s.force:
            self._alert("projection", f"{self.projection_text}; --force: training on to the cap", once="projection")
        else:
            self._stop(control, "projection")

    def _projection_figures(self, projected: float, eta: float) -> str:
        """The projection and the cheapest changes that would fit the budget."""
        s, elapsed = self.settings, self.elapsed_s
        budget, price = s.budget_usd or 0.0, s.price_per_hour or 0.0
        remaining = max(self._max_steps - self._step, 1)
        pace = eta / remaining
        spent = self.meter.billed(elapsed + self.save_s)
        fit = max(int((budget - spent) / (price * pace / 3600)), 0) if price and pace else 0
        total_fit = self._step + fit
        text = (f"at the measured {pace:.3g} s/step the {remaining} remaining steps take {eta / 3600:.2f} h, "
                f"projecting {usd(projected)} against the {usd(budget)} budget ({usd(self.cost_usd or 0.0)} spent). "
                f"What fits: --max-steps {total_fit} ({100 * total_fit / max(self._max_steps, 1):.2g}% of the planned "
                "steps; fewer epochs in proportion), shorter sequences (--seq-len)")
        left = projected - (self.cost_usd or 0.0)
        if left > 0 and budget > (self.cost_usd or 0.0):
            text += f", or an offer at or under {usd(price * (budget - (self.cost_usd or 0.0)) / left)}/h at this speed"
        return text

    def _stop(self, control, reason: str) -> None:
        control.should_save = True
        control.should_training_stop = True
        if self.stop_reason is None:
            self.stop_reason = reason
            self._alert("stop", f"{STOP_MESSAGES[reason]} at step {self._step}", once=None)

    def _on_idle(self, idle_s: float) -> None:
        self._alert("idle", f"no training progress for {idle_s / 60:.1f} min"
                    + ("; checkpointing and stopping" if self.settings.idle_stop else ""), once=None)
        self._idle_pending = self.settings.idle_stop

    def _hung(self) -> None:
        if self.settings.idle_stop:
            self.stop_reason = self.stop_reason or "idle"
            log.error("training loop is stuck: sending SIGTERM to this process so it checkpoints and exits")
            self.on_hung()

    def _check_idle_stop(self, control) -> None:
        if self._idle_pending:
            self._idle_pending = False
            self._stop(control, "idle")

    def _alert(self, kind: str, message: str, once: str | None, level_only: bool = False) -> None:
        """Send an alert; with `once`, at most once per run across resumes (claimed in the registry)."""
        if once is not None:
            with self._lock:  # threshold timers run on their own threads
                if once in self._fired:
                    return
                self._fired.add(once)
            if self.run and not self.run.fire_once(once):
                return
        if self.run:
            self.run.event(kind, {"message": message, "step": self._step})
        if level_only:
            log.warning("cheaptune: %s", message)
        else:
            self.alerter.send(kind, message, {"run_id": getattr(self.run, "id", None), "step": self._step,
                                              **{k: v for k, v in self.status().items() if v is not None}})

    def _persist(self, force: bool = False) -> None:
        now = self.clock()
        if self.run is None or (not force and now - self._last_write < self.settings.heartbeat_s):
            return
        self._last_write = now
        elapsed = self.elapsed_s
        cost = self.meter.segment_cost(elapsed) if self.settings.price_per_hour is not None else None
        fields = {"steps": self._step, "elapsed_s": self._prior_s + elapsed}
        if self.projected_usd is not None:
            fields["cost_projected_usd"] = self.projected_usd
        if self.stop_reason:
            fields["stop_reason"] = self.stop_reason
        self.run.update(**fields)
        if cost is not None:
            self.run.add_segment_cost(cost)
            if self.settings.spend_file:
                ledger.record(self.settings.spend_file, self._ledger_key, usd=cost, elapsed_s=elapsed,
                              step_s=self._step_s or None, save_s=self._save_s, at=time.time())
        self.run.record_point(self._step, elapsed_s=self._prior_s + elapsed, cost_usd=self.cost_usd)


def apply_on_finish(settings: GuardSettings, outcome: str) -> list[str] | None:
    """Run (or, with dry_run_shutdown, print) the on-finish command; returns it. Never raises.

    Applied for finished, failed and budget-stopped runs; skipped for "preempted", where the
    provider is taking the instance anyway and a managed job's recovery must be able to relaunch.
    """
    if outcome == "preempted":
        return None
    try:
        command = shutdown_command(settings.on_finish, settings.shutdown_preset, settings.shutdown_command)
    except Exception as err:  # the run is over: report, never mask the run's own outcome
        log.error("on-finish %s not applied: %s", settings.on_finish, err)
        return None
    if command:
        run_shutdown(command, dry_run=settings.dry_run_shutdown)
    return command


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
