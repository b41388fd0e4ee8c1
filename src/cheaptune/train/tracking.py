"""Experiment tracking: which of transformers' report_to integrations to use, and cheaptune's own figures.

The integrations (TensorBoard, W&B, MLflow) are transformers' callbacks; we only choose them and add
our metrics to the logs they write: $ spent and projected and the budget fraction come from the guard
(`runs.guard.GuardCallback.on_log`), tokens/s and measured against predicted peak memory from
`MetricsCallback` here. Both sit in front of the integrations in the callback list, so every log step
carries them.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
import time
from typing import Any

from transformers import TrainerCallback

from cheaptune.errors import BadInput
from cheaptune.train.config import tracker_names

# The module transformers needs for each tracker (any one of them), and the extra that installs it.
_MODULES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "mlflow": ("mlflow",)}
_EXTRA = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def installed(tracker: str) -> bool:
    return any(importlib.util.find_spec(m) is not None for m in _MODULES[tracker])


def resolve_report_to(value: str | list[str] | None) -> list[str]:
    """The trackers to use: `value` checked (names, installed), or by default TensorBoard when installed.

    Returns [] for none; "none" must stand alone. BadInput names the problem and the fix.
    """
    if value is None:
        return ["tensorboard"] if installed("tensorboard") else []
    names = tracker_names(value)  # the names alone: the config's validation (doctor and launch check them too)
    for name in names:
        if not installed(name):
            raise BadInput(f"report_to: {name} is not installed; pip install 'cheaptune[{_EXTRA[name]}]' "
                           "or drop it from report_to")
    if "wandb" in names:
        _check_wandb_login()
    return names


def _check_wandb_login() -> None:
    """W&B without an API key fails at the first step, after the model loaded, with a traceback (when no
    terminal can prompt for one); ask wandb for its credentials (no network: verify=False) before that."""
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") or os.environ.get("WANDB_API_KEY"):
        return
    import wandb

    try:
        wandb.login(verify=False)
    except wandb.errors.UsageError:
        raise BadInput("report_to: wandb has no API key; run `wandb login`, set WANDB_API_KEY (or "
                       "WANDB_MODE=offline), or drop wandb from report_to") from None


def peak_bytes() -> int:
    """Peak memory of the training device: CUDA max allocated, else this process's peak RSS."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


class MetricsCallback(TrainerCallback):
    """Adds tokens_per_s, peak_mem_gib and (when planned) peak_mem_predicted_gib to every log."""

    def __init__(self, predicted_peak_bytes: int | None = None, clock=time.monotonic) -> None:
        self.predicted = predicted_peak_bytes
        self.clock = clock
        self._t0 = 0.0
        self._tokens0 = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = self.clock()
        self._tokens0 = int(state.num_input_tokens_seen or 0)

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, **kwargs):
        if logs is None:
            return
        elapsed = self.clock() - self._t0
        tokens = int(state.num_input_tokens_seen or 0) - self._tokens0
        if elapsed > 0 and tokens > 0:
            logs["tokens_per_s"] = tokens / elapsed
        logs["peak_mem_gib"] = peak_bytes() / 2**30
        if self.predicted:
            logs["peak_mem_predicted_gib"] = self.predicted / 2**30
