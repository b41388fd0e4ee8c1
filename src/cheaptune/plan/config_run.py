"""`plan --config`: the run another trainer's config file describes, as the planner's inputs.

The memory keys come from the foreign-config reader (plan/foreign_config.py); this module adds the keys
that change time and cost (epochs, accumulation, max steps: the `time` lists of data/foreign_keys.yaml)
and a fit that sizes exactly the config's run (its trainer, micro-batch, checkpointing, LoRA) on each GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import FitFn, FitOutcome
from cheaptune.plan.foreign_config import ForeignConfig, request_for
from cheaptune.util.yamlfile import read_mapping

# Defaults when a config leaves a time key unset, per trainer: axolotl src/axolotl/utils/schemas/config.py
# (num_epochs 1.0, gradient_accumulation_steps 1); LLaMA-Factory: transformers TrainingArguments
# (num_train_epochs 3.0); litgpt: litgpt/finetune/lora.py setup() TrainArgs (epochs 5, global_batch_size 128).
EPOCH_KEY = {"axolotl": "num_epochs", "llama-factory": "num_train_epochs"}
DEFAULT_EPOCHS = {"axolotl": 1.0, "llama-factory": 3.0, "litgpt": 5.0}
LITGPT_GLOBAL_BATCH = 128


@dataclass(frozen=True)
class ConfigRun:
    """The config's run: the estimator's request, and how many sequences over how many epochs."""

    config: ForeignConfig
    request: Any  # EstimateRequest; precision None: the trainer's default
    epochs: float
    effective_batch: int  # sequences per optimizer step (micro-batch x accumulation)
    max_steps: int | None  # optimizer steps, when the config caps them
    dataset: str | None  # a local dataset file the config names


def _number(raw: dict, key: str, default: float, path, kind=float) -> float:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise BadInput(f"{path}: {key} must be a positive number; got {value!r}")
    return kind(value)


def read_run(path: str | Path, trainer: str | None = None, **flags: Any) -> ConfigRun:
    """The run `path` describes; one BadInput line for an unknown or contradictory key. `flags` given
    (not None) win over the config, as in `estimate --config`: model, seq_len, lora_r, epochs,
    effective_batch."""
    given = {k: flags.get(k) for k in ("model", "seq_len", "lora_r")}
    req, fc = request_for(str(path), trainer, given, {})
    raw = read_mapping(path, "config", "pass an Axolotl, LLaMA-Factory or litgpt YAML config")
    if req.gpus > 1:
        raise BadInput(f"{path}: devices {req.gpus}: plan --config sizes one GPU; set devices: 1, or plan the model "
                       "without --config to compare multi-GPU layouts")
    if fc.trainer == "litgpt":
        train = raw.get("train") or {}
        batch = int(_number(train, "global_batch_size", LITGPT_GLOBAL_BATCH, path, int))
        if batch < req.micro_batch:
            raise BadInput(f"{path}: train.global_batch_size {batch} is below train.micro_batch_size "
                           f"{req.micro_batch}; raise it")
        if raw.get("quantize") and raw.get("precision") == "bf16-mixed":
            raise BadInput(f"{path}: quantize with precision bf16-mixed is refused by litgpt; use bf16-true")
        epochs = _number(train, "epochs", DEFAULT_EPOCHS["litgpt"], path)
        steps = train.get("max_steps")
    else:
        accum = int(_number(raw, "gradient_accumulation_steps", 1, path, int))
        batch = req.micro_batch * accum
        epochs = _number(raw, EPOCH_KEY[fc.trainer], DEFAULT_EPOCHS[fc.trainer], path)
        steps = raw.get("max_steps")
    steps = int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    if flags.get("epochs") is not None:
        epochs, steps = flags["epochs"], None
    batch = flags.get("effective_batch") or batch
    return ConfigRun(fc, req, epochs, batch, steps, _local_dataset(raw, path))


def _local_dataset(raw: dict, path) -> str | None:
    """Axolotl's first `datasets` entry when it is a file beside the config (hub datasets need --tokens)."""
    entries = raw.get("datasets") or []
    first = entries[0].get("path") if entries and isinstance(entries[0], dict) else None
    if not first:
        return None
    local = Path(path).parent / str(first)
    return str(local) if local.is_file() else None


def epochs_for(run: ConfigRun, tokens: int, seq_len: int) -> float:
    """The epochs the run trains: `max_steps` optimizer steps over `tokens` when the config caps them
    (the trainer stops at whichever comes first), else the config's epochs."""
    if run.max_steps is None:
        return run.epochs
    return min(run.epochs, run.max_steps * run.effective_batch * seq_len / tokens)


def config_fit(run: ConfigRun, headroom: float) -> FitFn:
    """A FitFn for exactly the config's run: its peak on each GPU at its own micro-batch; a GPU is kept
    when that peak leaves `headroom` free. Without an explicit precision cheaptune's own trainer takes
    the GPU's, another trainer its profile's default (what it would run)."""
    from cheaptune.estimate.memory import estimate_memory

    base = run.request

    def fit(method: str, mem: int, precision: str) -> FitOutcome:
        own = base.precision or (precision if base.trainer == "cheaptune" else None)
        quant = base.quant if method == "qlora" else None
        est = estimate_memory(dataclasses.replace(base, method=method, precision=own, quant=quant))
        fits = est.device_total_bytes <= mem * (1 - headroom)
        return FitOutcome(fits, base.micro_batch if fits else 0, base.grad_ckpt, est.device_total_bytes,
                          est.trainable_params, est.total_params, est.basis)

    return fit


def notes(run: ConfigRun) -> list[str]:
    """What the plan took from the config and what it left out, once each."""
    from cheaptune.plan.foreign_config import time_keys

    req, fc = run.request, run.config
    out = [f"sized as {fc.trainer} runs the config: micro-batch {req.micro_batch}, "
           f"{run.effective_batch} sequences per step, {run.epochs:g} epochs"
           + (f" or {run.max_steps} steps, whichever is first" if run.max_steps else "")]
    skipped = [k for k in fc.ignored if k not in time_keys(fc.trainer)]
    if skipped:
        out.append(f"config keys ignored (no change to memory, time or cost): {', '.join(skipped)}")
    if fc.named:
        out.append(f"config keys not modelled (they change the run): {', '.join(fc.named)}")
    return out
