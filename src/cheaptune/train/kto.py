"""KTO: trl's KTOTrainer (rated single completions, no pairs) with our atomic checkpoints, configured from our config.

The loss, the KL estimate from mismatched completions in a batch and the reference model are trl's; we add
what SFT runs get. As for DPO, a PEFT run's reference is the base with adapters disabled (trl's default when
no reference model is given); full fine-tuning holds trl's frozen copy.
"""

from __future__ import annotations

from typing import Any

from trl import KTOConfig, KTOTrainer

from cheaptune.train.config import TrainConfig
from cheaptune.train.methods import Precision
from cheaptune.train.trainer import AtomicCheckpoints, atomic_trainer, trainer_args


class AtomicKTOTrainer(AtomicCheckpoints, KTOTrainer):
    """KTOTrainer whose checkpoints appear all at once, verified, under `checkpoint_root`."""


def build_kto_trainer(cfg: TrainConfig, prec: Precision, model: Any, tokenizer: Any, train_ds: Any,
                      eval_ds: Any, fmt: str, callbacks: list[Any]) -> AtomicKTOTrainer:
    """The KTO trainer; same signature as trainer.build_trainer. trl reads the rows in file order (its KL term
    pairs each completion with a neighbour's), so the data are not shuffled."""
    args = KTOConfig(**trainer_args(cfg, prec, eval_ds is not None), beta=cfg.beta)
    return atomic_trainer(AtomicKTOTrainer, cfg, args, model, tokenizer, train_ds, eval_ds, callbacks)
