"""Preference tuning: trl's DPOTrainer and ORPOTrainer with our atomic checkpoints, configured from our config.

The losses, the concatenated chosen+rejected forward, the reference model and the precomputing of its
log-probs are trl's; we add what SFT runs get (atomic checkpoints, exact resume, the guard rails) and
choose the reference the memory estimate simulates.
"""

from __future__ import annotations

from typing import Any

from trl import DPOConfig, DPOTrainer
from trl.experimental.orpo import ORPOConfig, ORPOTrainer

from cheaptune.train.config import TrainConfig
from cheaptune.train.methods import Precision
from cheaptune.train.trainer import AtomicCheckpoints, atomic_trainer, trainer_args


class AtomicDPOTrainer(AtomicCheckpoints, DPOTrainer):
    """DPOTrainer whose checkpoints appear all at once, verified, under `checkpoint_root`.

    Full fine-tuning: trl loads a frozen copy of the base as the reference (none with precompute_ref_log_probs).
    PEFT: our adapter is freshly initialised, so the base with adapters disabled is the reference. trl
    also copies a PeftModel's adapter as a frozen "ref" adapter (meant for a pretrained one); we drop that
    copy, so the reference forward is the adapter-disabled one and the copy's memory is not spent.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "ref" in getattr(self.model, "peft_config", {}):
            self.model.delete_adapter("ref")


class AtomicORPOTrainer(AtomicCheckpoints, ORPOTrainer):
    """ORPOTrainer (no reference model: the odds ratio is the policy's own) with atomic checkpoints."""

    def _track_num_input_tokens(self, inputs: dict[str, Any]) -> None:
        # ORPO batches carry chosen_/rejected_input_ids, not input_ids, so Trainer would count nothing (and
        # tokens/s, the probe and the summary would read 0). Count what its concatenated forward runs: both
        # sides padded to the longer one, as DPO's input_ids are.
        chosen, rejected = inputs["chosen_input_ids"], inputs["rejected_input_ids"]
        rows, width = chosen.shape[0] + rejected.shape[0], max(chosen.shape[1], rejected.shape[1])
        super()._track_num_input_tokens({"input_ids": chosen.new_empty(rows, width)})


def preference_config(cfg: TrainConfig, prec: Precision, has_eval: bool) -> DPOConfig | ORPOConfig:
    """DPOConfig or ORPOConfig from our config: the shared trainer arguments plus the objective's own."""
    common = trainer_args(cfg, prec, has_eval)
    if cfg.objective == "dpo":
        return DPOConfig(**common, beta=cfg.beta, precompute_ref_log_probs=cfg.precompute_ref_log_probs)
    return ORPOConfig(**common, beta=cfg.beta)


def build_preference_trainer(cfg: TrainConfig, prec: Precision, model: Any, tokenizer: Any, train_ds: Any,
                             eval_ds: Any, fmt: str, callbacks: list[Any]) -> AtomicDPOTrainer | AtomicORPOTrainer:
    """The trainer for cfg.objective (dpo | orpo); same signature as trainer.build_trainer."""
    cls = AtomicDPOTrainer if cfg.objective == "dpo" else AtomicORPOTrainer
    args = preference_config(cfg, prec, eval_ds is not None)
    return atomic_trainer(cls, cfg, args, model, tokenizer, train_ds, eval_ds, callbacks)
