"""Small Trainer callbacks: wall-clock saves and a one-line progress report per log."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from transformers import TrainerCallback


class TimedSaveCallback(TrainerCallback):
    """Ask for a checkpoint every `minutes` of wall clock (the Young/Daly interval for spot runs)."""

    def __init__(self, minutes: float, clock=time.monotonic) -> None:
        self.interval_s = minutes * 60.0
        self.clock = clock
        self._last = clock()

    def on_save(self, args, state, control, **kwargs):
        self._last = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        if self.clock() - self._last >= self.interval_s:
            control.should_save = True
        return control


class ProgressCallback(TrainerCallback):
    """Prints step, loss, tokens/s and ETA to stderr and appends each log to a JSONL file."""

    def __init__(self, log_path: Path | None = None, stream=None) -> None:
        self.log_path = log_path
        self.stream = stream
        self._t0 = 0.0
        self._step0 = 0
        self._tokens0 = 0
        self._printed = -1

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = time.monotonic()
        self._step0 = state.global_step
        self._tokens0 = state.num_input_tokens_seen or 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps({"step": state.global_step, **logs}) + "\n")
        if state.global_step == self._printed and not ({"loss", "eval_loss"} & set(logs)):
            return  # the Trainer's closing summary at the step just printed: said once
        self._printed = state.global_step
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        done = state.global_step - self._step0
        tok_s = ((state.num_input_tokens_seen or 0) - self._tokens0) / elapsed
        eta = (state.max_steps - state.global_step) * elapsed / done if done > 0 else float("nan")
        parts = [f"step {state.global_step}/{state.max_steps}"]
        if "loss" in logs:
            parts.append(f"loss {logs['loss']:.4f}")
        if "eval_loss" in logs:
            parts.append(f"eval_loss {logs['eval_loss']:.4f}")
        parts += [f"{tok_s:.0f} tok/s", f"ETA {eta:.0f}s" if done > 0 else "ETA -"]
        print("  ".join(parts), file=self.stream or sys.stderr, flush=True)
