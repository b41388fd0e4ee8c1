"""GRPO: trl's GRPOTrainer with our atomic checkpoints and guard rails, configured from our config.

The rollouts, the group-relative advantages, the clipped loss, the reference model and vLLM generation
are trl's; we add what SFT runs get (atomic checkpoints, exact resume, the budget cap, exit 143) and the
verifiable rewards (cheaptune.train.rewards). Exact resume holds because trl regenerates at every
optimizer step (steps_per_generation = gradient_accumulation_steps, one iteration per batch), so a
checkpoint never falls inside a batch of buffered rollouts, and Trainer restores the RNG state the
sampling draws from.
"""

from __future__ import annotations

import sys
from typing import Any

from trl import GRPOConfig, GRPOTrainer

from cheaptune.errors import BadInput
from cheaptune.train import rewards
from cheaptune.train.config import TrainConfig
from cheaptune.train.methods import Precision
from cheaptune.train.trainer import AtomicCheckpoints, trainer_args

NOT_IN_GRPO = ("max_length", "dataset_num_proc")  # SFT/DPO arguments GRPOConfig does not take (trl 1.16)


class AtomicGRPOTrainer(AtomicCheckpoints, GRPOTrainer):
    """GRPOTrainer whose checkpoints appear all at once, verified, under `checkpoint_root`.

    With beta > 0 and an adapter, trl copies our freshly initialised adapter as a frozen "ref" adapter; it
    equals the base with adapters disabled, so (as for DPO) the copy is dropped and the reference forward
    runs with adapters off. Full fine-tuning with beta > 0 holds trl's frozen copy of the model.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "ref" in getattr(self.model, "peft_config", {}):
            self.model.delete_adapter("ref")


def generation_args(cfg: TrainConfig, device: str) -> dict[str, Any]:
    """GRPOConfig's generation backend: colocated or server vLLM, or transformers' generate.

    `auto` is colocated vLLM on CUDA when the `rl` extra is installed, transformers' generate otherwise
    (said once on CUDA, where vLLM would be several times faster)."""
    backend = cfg.generation_backend
    has_vllm = _vllm_installed()
    if backend == "auto":
        backend = "vllm" if device == "cuda" and has_vllm else "transformers"
        if device == "cuda" and not has_vllm:
            print("note: vllm is not installed (pip install 'cheaptune[rl]'): rollouts use transformers' "
                  "generate, which is slower", file=sys.stderr, flush=True)
    if backend == "transformers":
        return {"use_vllm": False}
    if backend == "vllm" and device != "cuda":
        raise BadInput(f"generation_backend vllm runs on a CUDA GPU, not {device}; use transformers")
    if not has_vllm:
        raise BadInput(f"generation_backend {backend} needs vllm: pip install 'cheaptune[rl]'")
    if backend == "vllm-server":
        return {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": cfg.vllm_server_url}
    return {"use_vllm": True, "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": cfg.vllm_gpu_memory_utilization}


def grpo_config(cfg: TrainConfig, prec: Precision, has_eval: bool, weights: list[float]) -> GRPOConfig:
    """GRPOConfig from our config: the shared trainer arguments plus GRPO's cost-driving settings."""
    common = {k: v for k, v in trainer_args(cfg, prec, has_eval).items() if k not in NOT_IN_GRPO}
    common["per_device_eval_batch_size"] = cfg.num_generations  # an eval batch holds whole prompt groups
    common["include_num_input_tokens_seen"] = "no"  # trl counts prompt + completion tokens itself
    return GRPOConfig(
        **common, beta=cfg.beta, num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length, temperature=cfg.temperature, loss_type=cfg.loss_type,
        vllm_max_model_length=cfg.sequence_len,  # vLLM's window: prompt + completion (sequence_len)
        reward_weights=weights, log_completions=False, **generation_args(cfg, prec.device),
    )


def build_grpo_trainer(cfg: TrainConfig, prec: Precision, model: Any, tokenizer: Any, train_ds: Any,
                       eval_ds: Any, fmt: str, callbacks: list[Any]) -> AtomicGRPOTrainer:
    """The GRPO trainer; same signature as trainer.build_trainer. Each row gets its number (rewards.ROW, 1 =
    first; the file's line for one JSONL file without a validation split), so a failing user reward names it."""
    rewards.check_columns(cfg, train_ds.column_names, f"dataset {cfg.datasets[0].path}")
    funcs, weights = rewards.build_rewards(cfg)
    train_ds = _indexed(train_ds)
    eval_ds = _indexed(eval_ds) if eval_ds is not None else None
    return AtomicGRPOTrainer(
        model=model, reward_funcs=funcs, args=grpo_config(cfg, prec, eval_ds is not None, weights),
        train_dataset=train_ds, eval_dataset=eval_ds, processing_class=tokenizer, callbacks=callbacks,
        checkpoint_root=cfg.checkpoint_root, keep_last=cfg.save_total_limit,
    )


def _indexed(ds: Any) -> Any:
    if rewards.ROW in ds.column_names:
        return ds
    return ds.add_column(rewards.ROW, list(range(1, len(ds) + 1)))


def _vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
