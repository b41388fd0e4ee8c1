"""Guard rails inside the HF Trainer: cost meter, budget and time caps, alerts, watchdogs, shutdown.

Trainer side, in order:

    settings = GuardSettings(price_per_hour=..., budget_usd=..., on_finish="stop", ...)
    check_budget(projected_usd, settings.budget_usd, force)   # cheaptune.runs.meter; Infeasible (exit 3)
    guard = GuardCallback(settings, run, clock=time.monotonic)  # run: RunHandle or None
    attach(trainer, guard)        # first in the callback list, so report_to sees the cost figures
    trainer.train(resume_from_checkpoint=...)
    if guard.stop_reason:         # "budget" | "max_hours" | "idle": a checkpoint was saved
        run.finish("budget-stopped", stop_reason=guard.stop_reason); apply_on_finish(settings, "budget-stopped")
        raise BudgetStop(guard.stop_message)                    # exit 10
    run.finish("finished", ...); apply_on_finish(settings, "finished")   # and "failed" on an error

At a cap the callback sets control.should_save and control.should_training_stop at a step end, so the
Trainer saves a checkpoint and leaves its loop. It stops when the billed cost after one more step plus
a checkpoint would pass the budget, so the overshoot is under one step's cost plus the checkpoint even
when steps slow down. `guard.status()` / `guard.progress_text()` give the figures for a progress bar;
on_log adds cost_usd, cost_projected_usd, budget_used and data_wait_frac to the logs (tensorboard,
wandb, mlflow). The callback writes progress to the run (throttled to settings.heartbeat_s) but never
calls run.finish: the trainer picks the final status.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

from transformers import TrainerCallback

from cheaptune.runs.alerts import Alerter, webhook_from_env
from cheaptune.runs.meter import CostMeter
from cheaptune.runs.settings import GuardSettings
from cheaptune.runs.shutdown import run_shutdown, shutdown_command
from cheaptune.runs.watchdog import IdleWatchdog, StarvationWatch

log = logging.getLogger("cheaptune.runs")

__all__ = ["GuardSettings", "GuardCallback", "apply_on_finish", "attach", "make_alerter"]

STOP_MESSAGES = {
    "budget": "stopped at the budget cap after a checkpoint",
    "max_hours": "stopped at --max-hours after a checkpoint",
    "idle": "stopped after no progress for the idle limit, after a checkpoint",
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
                 alerter: Alerter | None = None) -> None:
        self.settings, self.run, self.clock = settings, run, clock
        self.alerter = alerter or make_alerter(settings)
        # Resolve the shutdown command now, so a bad preset fails before any money is spent.
        self.shutdown = shutdown_command(settings.on_finish, settings.shutdown_preset, settings.shutdown_command)
        self.stop_reason: str | None = None
        self.starvation = StarvationWatch(settings.starvation_threshold)
        self.idle: IdleWatchdog | None = None
        self.on_hung: Callable[[], None] = _sigterm_self
        self.meter = CostMeter(settings.price_per_hour or 0.0, settings.billing_unit_s, settings.min_billed_s)
        self._prior_s = 0.0
        self._t0 = self._mark = self._step_start = self._last_end = self._first_end = None
        self._start_step = self._step = self._max_steps = 0
        self._step_s = self._wait = 0.0
        self._save_s: float | None = None
        self._last_write = float("-inf")
        self._fired: set[str] = set()
        self._idle_pending = False
        self._projection_checked = False

    # ---- figures ----
    @property
    def elapsed_s(self) -> float:
        return 0.0 if self._t0 is None else self.clock() - self._t0

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
        cost = self.cost_usd
        spent = f" (${cost:.2f} spent)" if cost is not None else ""
        return STOP_MESSAGES.get(self.stop_reason or "", "not stopped") + spent + "; resume with --resume"

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
        text = f"${s['cost_usd']:.2f}" + (f" of ${s['budget_usd']:.2f}" if s["budget_usd"] else "")
        return text + (f", ~${s['projected_usd']:.2f} at ETA" if s["projected_usd"] is not None else "")

    # ---- TrainerCallback hooks ----
    def on_train_begin(self, args, state, control, **kwargs):
        prior_usd = self.run.prior_cost_usd() if self.run else 0.0
        self._prior_s = self.run.prior_elapsed_s() if self.run else 0.0
        self.meter = CostMeter(self.meter.price_per_hour, self.meter.billing_unit_s, self.meter.min_billed_s, prior_usd)
        self._t0 = self._mark = self.clock()
        self._start_step = self._step = state.global_step
        self._max_steps = state.max_steps
        if self.settings.idle_minutes:
            self.idle = IdleWatchdog(self.settings.idle_minutes * 60, self._on_idle, self._hung, self.clock).start()
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
        cycle = now - (self._last_end if self._last_end is not None else self._t0)
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
        if self.idle:
            self.idle.stop()
        self._step = state.global_step
        self._persist(force=True)
        self.alerter.join()
        return control

    # ---- internals ----
    def _check_money(self, control) -> None:
        s, elapsed = self.settings, self.elapsed_s
        lookahead = self._step_s + (s.checkpoint_s if self._save_s is None else self._save_s)
        if s.budget_usd and s.price_per_hour is not None:
            used = self.meter.accrued(elapsed) / s.budget_usd
            for t in s.alert_thresholds:
                if used >= t:
                    self._alert("budget_threshold", f"{t:.0%} of the ${s.budget_usd:.2f} budget used "
                                f"(${self.meter.billed(elapsed):.2f} billed)", once=f"budget:{t:g}")
            self._check_projection()
            if self.meter.billed(elapsed + lookahead) > s.budget_usd:
                self._stop(control, "budget")
        if s.max_hours and self._prior_s + elapsed + lookahead > s.max_hours * 3600:
            self._stop(control, "max_hours")

    def _check_projection(self) -> None:
        done = self._step - self._start_step
        if self._projection_checked or done < self.settings.reproject_after_steps:
            return
        self._projection_checked = True
        projected = self.projected_usd
        if projected is not None and projected > (self.settings.budget_usd or float("inf")):
            self._alert("projection", f"measured pace projects ${projected:.2f} at the ETA, above the "
                        f"${self.settings.budget_usd:.2f} budget: the run will stop at the cap", once="projection")

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
