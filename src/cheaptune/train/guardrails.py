"""The runs engineer's guard rails and registry, wired to a training run (contract: docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from cheaptune.train import resume as rs
from cheaptune.train.config import TrainConfig, guard_settings


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


# Assumed until the first save is measured: a slow network disk or mounted bucket. Over-estimating it
# only stops a capped run a little early; the measured save time replaces it after the first checkpoint.
ASSUMED_WRITE_BYTES_PER_S = 100e6
SAVE_FIXED_S = 1.0  # trainer state, RNG, scheduler, checksums and the rename


def checkpoint_seconds(model: Any) -> float:
    """Assumed time to save a checkpoint of `model`: trainable weights plus two fp32 AdamW moments."""
    params = [p for p in model.parameters() if p.requires_grad]
    size = sum(p.numel() * (p.element_size() + 8) for p in params)
    return SAVE_FIXED_S + size / ASSUMED_WRITE_BYTES_PER_S


class RegistryCallback(TrainerCallback):
    """Per-log step and token counts into the registry (the guard records losses and cost points)."""

    def __init__(self, run: Any) -> None:
        self.run = run

    def on_train_begin(self, args, state, control, **kwargs):
        self.run.update(total_steps=state.max_steps)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # losses and the plotted points are written by the GuardCallback on the same run
        self.run.update(steps=state.global_step, tokens=int(state.num_input_tokens_seen or 0))


def finish_hook(cfg: TrainConfig, outcome: str) -> None:
    """The user's on_finish action (stop/terminate the instance) after a finished or capped run."""
    if cfg.on_finish == "nothing":
        return
    from cheaptune.runs.guard import apply_on_finish

    apply_on_finish(guard_settings(cfg), outcome)
