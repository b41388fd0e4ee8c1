"""trl's SFTTrainer with atomic checkpoints, plus the SFTConfig built from our config.

The training loop, packing, chat templates and completion-only loss are trl's and transformers';
we only change where a checkpoint is written (a staging folder, then one rename).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from accelerate.utils import parse_flag_from_env
from transformers.trainer_callback import PrinterCallback
from trl import SFTConfig, SFTTrainer

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import DEFAULT_OPTIMIZER, hf_optim
from cheaptune.train import checkpoints as ck
from cheaptune.train import speedups
from cheaptune.train.config import TrainConfig
from cheaptune.train.methods import Precision
from cheaptune.train.tracking import resolve_report_to


class AtomicCheckpoints:
    """Mixin for a trl trainer: checkpoints appear all at once, verified, under `checkpoint_root`."""

    def __init__(self, *args: Any, checkpoint_root: Path, keep_last: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkpoint_root = Path(checkpoint_root)
        self.keep_last = keep_last
        self.last_save_seconds: float | None = None
        self.last_checkpoint: Path | None = None
        self._staging = False
        self.remove_callback(PrinterCallback)  # cheaptune.train.callbacks.ProgressCallback prints instead

    def _get_output_dir(self, trial: Any) -> str:
        if self._staging:
            return str(ck.staging_dir(self.checkpoint_root))
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Any world size: every rank writes its part (rng_state_{rank}, FSDP shards) into the one staging
        folder between barriers; only the main process clears, publishes and prunes. With one process it
        does exactly what the single-GPU save does."""
        with ck.no_space_stops(self.checkpoint_root, self.state.global_step):
            start = time.monotonic()
            root, main = self.checkpoint_root, self.args.should_save
            if main:
                ck.clear_staging(root)
            self.accelerator.wait_for_everyone()
            self._staging = True
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self._staging = False
            self.accelerator.wait_for_everyone()
            final = root / f"checkpoint-{self.state.global_step}"
            if main:
                final = ck.publish(ck.staging_dir(root) / final.name, root)
                ck.clear_staging(root)
                ck.apply_retention(root, ck.Retention(self.keep_last))
            self.accelerator.wait_for_everyone()
            self.last_checkpoint = final
            self.last_save_seconds = time.monotonic() - start


class AtomicSFTTrainer(AtomicCheckpoints, SFTTrainer):
    """SFTTrainer whose checkpoints appear all at once, verified, under `checkpoint_root`."""


def sft_config(cfg: TrainConfig, prec: Precision, fmt: str, has_eval: bool) -> SFTConfig:
    """SFTConfig from our config (trainer_args, plus packing and the loss masking the data format takes).

    Packing is trl's BFD packing, which runs padding-free (position ids restart per example). That is
    correct with sdpa and eager too, not only flash-attention: transformers finds the packed sequences
    from the position ids and builds a block-diagonal mask, so examples never attend to each other.
    Speed: under sdpa a packed row's attention still costs its whole square (only FlashAttention's varlen
    path skips the blocks off the diagonal), which is what the time model counts (attention at seq_len per
    token). Measured on CPU it still beats trl's unpacked, length-grouped batches (bench/README.md), so the
    trainer packs on every board.
    """
    # Prompt and prefix tuning prepend virtual tokens, which padding-free packed position ids do not
    # account for, so they train unpacked.
    packing = cfg.sample_packing and cfg.method not in ("prompt_tuning", "prefix_tuning")
    return SFTConfig(**trainer_args(cfg, prec, has_eval), packing=packing, assistant_only_loss=fmt == "messages")


def fsdp_checkpoints_activations() -> bool:
    """Whether this process runs under `accelerate launch` with FSDP's own activation checkpointing on.

    train/distributed.py turns it on for FSDP runs that checkpoint. transformers refuses it together with the
    training argument (transformers 5.24.0 trainer.py L879-884: ValueError) and prefers FSDP's, since the
    argument's checkpointing adds an all-gather in backward (training_args.py L692-694); so under FSDP the
    argument stays off and checkpointing still happens.
    """
    return parse_flag_from_env("ACCELERATE_USE_FSDP") and parse_flag_from_env("FSDP_ACTIVATION_CHECKPOINTING")


def trainer_args(cfg: TrainConfig, prec: Precision, has_eval: bool) -> dict[str, Any]:
    """The arguments every trl trainer config (SFT, DPO, ORPO) takes from our config; precision and device
    are always explicit (trl defaults to bf16 and gradient checkpointing).

    bf16/fp16 are the autocast flags: on for *-mixed, off for bf16-true (the model itself is bf16) and
    fp32. The optimizer defaults to the policy's (fused AdamW), which the memory estimate simulates.
    """
    eval_on = has_eval and cfg.eval_steps is not None
    workers = cfg.dataloader_num_workers
    return dict(
        output_dir=cfg.output_dir,
        per_device_train_batch_size=cfg.micro_batch_size,
        per_device_eval_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_train_epochs=cfg.num_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps,
        optim=cfg.optimizer or hf_optim(DEFAULT_OPTIMIZER, prec.device),
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        bf16=prec.bf16,
        fp16=prec.fp16,
        use_cpu=prec.device == "cpu",
        gradient_checkpointing=cfg.gradient_checkpointing and not fsdp_checkpoints_activations(),
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        save_total_limit=None,  # retention is ours (ck.apply_retention), across checkpoint_root
        eval_strategy="steps" if eval_on else "no",
        eval_steps=cfg.eval_steps,
        logging_steps=cfg.logging_steps,
        report_to=resolve_report_to(cfg.report_to) or "none",
        run_name=Path(cfg.output_dir).resolve().name,
        disable_tqdm=True,  # cheaptune.train.progress prints step, loss, tokens/s and ETA
        include_num_input_tokens_seen="all",
        max_length=cfg.sequence_len,
        dataset_num_proc=cfg.dataset_num_proc,
        dataloader_num_workers=workers,
        dataloader_pin_memory=prec.device == "cuda",
        dataloader_prefetch_factor=2 if workers > 0 else None,
        dataloader_persistent_workers=workers > 0,
        **speedups.trainer_args(cfg),
    )


def atomic_trainer(cls: type, cfg: TrainConfig, args: Any, model: Any, tokenizer: Any, train_ds: Any,
                   eval_ds: Any, callbacks: list[Any]) -> Any:
    """A trl trainer class with AtomicCheckpoints, built the same way for every objective."""
    return cls(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        checkpoint_root=cfg.checkpoint_root,
        keep_last=cfg.save_total_limit,
    )


def build_trainer(cfg: TrainConfig, prec: Precision, model: Any, tokenizer: Any, train_ds: Any,
                  eval_ds: Any, fmt: str, callbacks: list[Any]) -> AtomicSFTTrainer:
    args = sft_config(cfg, prec, fmt, eval_ds is not None)
    return atomic_trainer(AtomicSFTTrainer, cfg, args, model, tokenizer, train_ds, eval_ds, callbacks)


SCAN_ROWS = 2048  # prepared rows looked at for the share that trains nothing (the whole set only when none trains)
EMPTY_WARN = 0.10  # warn when at least this share of them has no token in the loss


def check_trained_tokens(ds: Any, seq_len: int) -> str | None:
    """With answer-only loss, a prompt that fills sequence_len cuts its answer away: that row's labels are all
    -100 (trl's mask) and it trains nothing. BadInput when no row trains (the run would bill every step at a
    loss of exactly 0); a warning line when many of the first SCAN_ROWS do not; None otherwise."""
    if "labels" not in (getattr(ds, "column_names", None) or ()):  # no masking (every token is in the loss)
        return None
    seen = empty = 0
    for batch in ds.select_columns(["labels"]).iter(batch_size=256):
        trains = [any(label != -100 for label in row) for row in batch["labels"]]
        seen, empty = seen + len(trains), empty + trains.count(False)
        if seen >= SCAN_ROWS and empty < seen:
            break
    fix = "raise sequence_len (--seq-len) or shorten the prompts"
    if empty == seen:
        raise BadInput(f"no row keeps any of its answer within sequence_len {seq_len}: the prompts fill it, so the "
                       f"loss would be 0 and nothing would train; {fix}")
    if empty >= EMPTY_WARN * seen:
        return (f"warning: {empty} of {seen} training rows ({empty / seen:.0%}) keep none of their answer within "
                f"sequence_len {seq_len} and train nothing (loss 0 on them); {fix}")
    return None
