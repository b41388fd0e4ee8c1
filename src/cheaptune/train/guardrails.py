"""The runs engineer's guard rails and registry, wired to a training run (contract: docs/architecture.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from cheaptune.train import resume as rs
from cheaptune.train.config import TrainConfig


def open_run(cfg: TrainConfig, resuming: bool, total_steps: int | None = None):
    """The registry record: the same one again when resuming (its id is kept beside the checkpoints)."""
    from cheaptune.errors import BadInput
    from cheaptune.runs.registry import Registry

    reg = Registry()
    root = cfg.checkpoint_root
    previous = rs.saved_run_id(root) if resuming else None
    if previous is not None:
        try:
            return reg.resume_run(previous)
        except BadInput:
            pass  # the registry was lost or moved: start a new record for this segment
    run = reg.start_run(
        config=cfg.model_dump(mode="json"),
        name=Path(cfg.output_dir).resolve().name,
        model=cfg.base_model,
        method=cfg.method,
        gpu_count=cfg.gpu_count,
        price_per_hour=cfg.price_per_hour,
        budget_usd=cfg.budget_usd,
        cost_predicted_usd=cfg.predicted_cost_usd,
        peak_mem_predicted=cfg.predicted_peak_bytes,
        output_dir=str(Path(cfg.output_dir).resolve()),
        total_steps=total_steps,
    )
    rs.save_run_id(root, run.id)
    return run


def guard_settings(cfg: TrainConfig):
    """GuardSettings from the config, passing only the fields that GuardSettings has."""
    from cheaptune.runs.guard import GuardSettings

    names = {f.name for f in dataclasses.fields(GuardSettings)}
    return GuardSettings(**{k: v for k, v in cfg.guard_fields().items() if k in names})


class RegistryCallback(TrainerCallback):
    """Per-log progress into the registry: the points `cheaptune report` plots."""

    def __init__(self, run: Any) -> None:
        self.run = run

    def on_train_begin(self, args, state, control, **kwargs):
        self.run.update(total_steps=state.max_steps)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        self.run.record_point(state.global_step, loss=logs.get("loss"), eval_loss=logs.get("eval_loss"))
        fields = {"steps": state.global_step, "tokens": int(state.num_input_tokens_seen or 0)}
        if "loss" in logs:
            fields["train_loss"] = logs["loss"]
        if "eval_loss" in logs:
            fields["eval_loss"] = logs["eval_loss"]
        self.run.update(**fields)


def finish_hook(cfg: TrainConfig, outcome: str) -> None:
    """The user's on_finish action (stop/terminate the instance) after a finished or capped run."""
    if cfg.on_finish == "nothing":
        return
    from cheaptune.runs.guard import apply_on_finish

    apply_on_finish(guard_settings(cfg), outcome)
