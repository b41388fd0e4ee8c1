"""Out of memory, handled: the fallback order that keeps the effective batch, and the recovery step.

transformers' `auto_find_batch_size` only shrinks the batch and restarts the loop from the start (or
the last checkpoint), changing the effective batch; here each fallback keeps micro-batch x accumulation
and the run continues from its last completed optimizer step with the same data order:

1. gradient checkpointing on;
2. halve the micro-batch and double the accumulation, down to a micro-batch of 1;
3. the paged 8-bit AdamW (bitsandbytes), only with `allow_optimizer_change: true` (its state restarts);
4. none left: `OutOfMemory` (exit 11): the same command on a larger GPU resumes the checkpoint
   (`cheaptune launch --watch` re-submits the task on the plan's next larger offer, `launch.watch`).
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cheaptune.errors import OutOfMemory
from cheaptune.train.config import TrainConfig
from cheaptune.util import atomic

PAGED_8BIT = "paged_adamw_8bit"
STATE_FILE = "cheaptune_fallback.json"  # beside the checkpoints, so a resumed run starts at the settings that fit


@dataclass(frozen=True)
class Fallback:
    """One step down the order: what changed (for the screen and the registry) and the new settings."""

    name: str
    detail: str
    changes: dict[str, Any]


def _smaller_micro(micro: int) -> int:
    """The largest divisor of `micro` at most half of it, so micro x accumulation stays exact."""
    return max(d for d in range(1, micro // 2 + 1) if micro % d == 0)


def next_fallback(cfg: TrainConfig) -> Fallback | None:
    """The next fallback for `cfg`, or None when every one is used."""
    if not cfg.gradient_checkpointing:
        return Fallback("gradient_checkpointing", "gradient checkpointing on", {"gradient_checkpointing": True})
    if cfg.micro_batch_size > 1:
        micro = _smaller_micro(cfg.micro_batch_size)
        accum = cfg.gradient_accumulation_steps * cfg.micro_batch_size // micro
        return Fallback("micro_batch", f"micro-batch {cfg.micro_batch_size} -> {micro}, accumulation "
                        f"{cfg.gradient_accumulation_steps} -> {accum} (same effective batch)",
                        {"micro_batch_size": micro, "gradient_accumulation_steps": accum})
    if cfg.allow_optimizer_change and cfg.optimizer != PAGED_8BIT:
        return Fallback("optimizer", f"optimizer {cfg.optimizer or 'default'} -> {PAGED_8BIT} (its state restarts)",
                        {"optimizer": PAGED_8BIT})
    return None


def free_memory() -> None:
    """Release what the failed step held (call outside the `except` block, so its frames are gone)."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def save_settings(root: Path, changes: dict[str, Any]) -> None:
    """Keep the settings that fit beside the checkpoints (merged with earlier fallbacks)."""
    atomic.write_text(root / STATE_FILE, json.dumps({**load_settings(root), **changes}, sort_keys=True))


def load_settings(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def emergency_checkpoint(trainer: Any, resumed_from: Path | None = None) -> Path | None:
    """Checkpoint the last completed step (None before the first one), reusing one already on disk.

    After an out-of-memory error inside a step, the weights and optimizer state are those of the last
    completed optimizer step (the update comes last), and the partial gradients are discarded.
    """
    step = trainer.state.global_step
    trainer.model.zero_grad(set_to_none=True)
    if step == 0:
        return None
    for known in (trainer.last_checkpoint, resumed_from):
        if known is not None and Path(known).name == f"checkpoint-{step}":
            return Path(known)
    trainer._save_checkpoint(trainer.model, trial=None)
    return trainer.last_checkpoint


def restart_optimizer_state(trainer: Any) -> None:
    """Resume a checkpoint without its optimizer state (after the optimizer changed), keeping the
    learning-rate schedule's position."""
    import torch

    def load(checkpoint: str | None) -> None:
        if checkpoint is not None:
            path = Path(checkpoint) / "scheduler.pt"
            trainer.lr_scheduler.load_state_dict(torch.load(path, weights_only=True))

    trainer._load_optimizer_and_scheduler = load


def train_with_fallbacks(trainer: Any, cfg: TrainConfig, resume_from: Path | None,
                         rebuild: Callable[[TrainConfig, Any], Any], run: Any = None,
                         stream: TextIO | None = None) -> tuple[Any, TrainConfig]:
    """`trainer.train()`, recovering from out-of-memory errors down the fallback order; returns the
    trainer that finished and its settings. Raises OutOfMemory (exit 11) when no fallback is left."""
    import torch

    while True:
        try:
            trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
            return trainer, cfg
        except torch.OutOfMemoryError as err:
            what = str(err).strip().splitlines()[0][:200] if str(err).strip() else "out of memory"
        free_memory()  # here, outside the except block, the failed step's tensors can be freed
        step = trainer.state.global_step
        fallback = next_fallback(cfg) if trainer.args.world_size == 1 else None
        ckpt = emergency_checkpoint(trainer, resume_from)
        detail = {"step": step, "error": what, "micro_batch": cfg.micro_batch_size,
                  "grad_accum": cfg.gradient_accumulation_steps, "checkpoint": str(ckpt) if ckpt else None}
        if fallback is None:
            if run is not None:
                run.event("oom", detail)
            err = OutOfMemory(f"out of GPU memory at step {step} after every fallback that keeps the effective "
                              f"batch{f' (checkpoint {ckpt} saved)' if ckpt else ''}; run the same command on a "
                              "GPU with more memory to resume (`cheaptune gpus` lists them; `cheaptune launch --watch` "
                              "moves a launched plan there itself)"
                              + ("" if cfg.allow_optimizer_change else
                                 ", or set allow_optimizer_change: true to try the paged 8-bit optimizer"))
            err.step = step
            raise err
        cfg = cfg.model_copy(update=fallback.changes)
        save_settings(cfg.checkpoint_root, fallback.changes)
        print(f"out of memory at step {step}: {fallback.detail}; continuing from step {step}",
              file=stream or sys.stderr, flush=True)
        if run is not None:
            run.event("oom_fallback", {**detail, "fallback": fallback.name, "change": fallback.detail,
                                       **fallback.changes})
        trainer = rebuild(cfg, trainer)
        if fallback.name == "optimizer":
            restart_optimizer_state(trainer)
        resume_from = ckpt
