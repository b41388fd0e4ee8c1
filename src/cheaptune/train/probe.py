"""The probe: the first optimizer steps of every `train`, measured against what the plan predicted.

The probe's steps are the run's own first steps (nothing is thrown away or repeated, so resume stays
exact). With packing (the default) every micro-batch is filled to the sequence length, so the probe
runs at the planned micro-batch and the longest sequences. On CUDA it reads the allocator's peak
(allocated and reserved, reset when the probe starts); other devices report no peak.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from transformers import TrainerCallback

from cheaptune.plan.planfile import is_cpu_board
from cheaptune.runs.events import pct as _pct
from cheaptune.runs.events import probe_line

SLOW = 0.75  # measured speed under 75% of the prediction is worth a warning (the 25%)


def on_planned_board(here: str | None, planned: str | None) -> bool:
    """Does a run on `here` (a GPU's catalog name, None on the CPU) run on the plan's board `planned`?"""
    return here == planned or (here is None and is_cpu_board(planned))


def device_peaks() -> tuple[int | None, int | None, int | None]:
    """(peak allocated, peak reserved, device used) bytes; None off CUDA.

    Device used (total - free, what nvidia-smi shows: context and reserved pool included) is what a plan
    predicts; the caching allocator keeps its pool, so after the steps it holds the peak."""
    import torch

    if not torch.cuda.is_available():
        return None, None, None
    free, total = torch.cuda.mem_get_info()
    return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved()), int(total - free)


def device_name() -> str | None:
    """The canonical name of the GPU this process trains on, None on CPU or an unknown board."""
    import torch

    if not torch.cuda.is_available():
        return None
    from cheaptune.catalog.gpus import normalize_gpu_name

    raw = torch.cuda.get_device_name()
    return normalize_gpu_name(raw) or raw


def slow_cause(data_wait_frac: float | None, on_gpu: bool = True) -> str:
    """The likely reason a measured speed is well under the prediction (a CPU run has no GPU to blame)."""
    if data_wait_frac is not None and data_wait_frac >= 0.10:
        return (f"data starvation ({data_wait_frac:.0%} of each step waits for the next batch: raise "
                "dataloader_num_workers or pre-tokenize)")
    if not on_gpu:
        return ("a CPU shared with other work, or fewer free cores than when the rate was measured (check the "
                "load average with `uptime` and the processes with `top`)")
    return ("a thermal or power cap, or a GPU shared with other work (check `nvidia-smi -q -d PERFORMANCE` "
            "and the processes on the GPU)")


class ProbeCallback(TrainerCallback):
    """Measures the first `steps` optimizer steps, prints one line and records it in the registry.

    `on_result(result)` receives the measurement dict (the guard re-projects from it). On a device other
    than `planned_gpu` (the CPU, another board) the speed is not held against that GPU's prediction."""

    def __init__(self, steps: int, predicted_peak: int | None, predicted_tokens_per_s: float | None,
                 run: Any = None, data_wait: Callable[[], float | None] = lambda: None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 planned_gpu: str | None = None) -> None:
        self.steps, self.predicted_peak, self.predicted_tps = steps, predicted_peak, predicted_tokens_per_s
        self.planned_gpu = planned_gpu
        self.run, self.data_wait, self.stream, self.clock = run, data_wait, stream, clock
        self.result: dict[str, Any] | None = None
        self._n = 0
        self._t0 = self._t1 = 0.0
        self._tok0 = self._tok1 = 0
        self._last = (0.0, 0)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.result is None:  # after an out-of-memory fallback the probe measures the new settings
            import torch

            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            self._n, self._t0, self._tok0 = 0, self.clock(), int(state.num_input_tokens_seen or 0)

    def on_step_end(self, args, state, control, **kwargs):
        if self.result is not None or self.steps <= 0:
            return
        self._n += 1
        now, tokens = self.clock(), int(state.num_input_tokens_seen or 0)
        self._last = (now, tokens)
        if self._n == 1:  # the first step carries the warm-up; the pace is measured after it when it can be
            self._t1, self._tok1 = now, tokens
        if self._n >= self.steps:
            self._measure(args, now, tokens)

    def on_train_end(self, args, state, control, **kwargs):
        if self.result is None and self._n > 0:  # a run shorter than the probe: measure what there was
            self._measure(args, *self._last)

    def _measure(self, args, now: float, tokens: int) -> None:
        t_ref, tok_ref, n = (self._t1, self._tok1, self._n - 1) if self._n > 1 else (self._t0, self._tok0, 1)
        seconds = max(now - t_ref, 1e-9)
        allocated, reserved, used = device_peaks()
        gpu = device_name()
        elsewhere = self.planned_gpu is not None and not on_planned_board(gpu, self.planned_gpu)
        self.result = {
            "steps": self._n, "micro_batch": args.per_device_train_batch_size,
            "grad_accum": args.gradient_accumulation_steps, "s_per_step": seconds / n,
            "tokens_per_s": (tokens - tok_ref) / seconds, "peak_allocated": allocated, "peak_reserved": reserved,
            "device_used": used,
            "predicted_peak": self.predicted_peak, "predicted_tokens_per_s": None if elsewhere else self.predicted_tps,
            "gpu": gpu, "planned_gpu": self.planned_gpu if elsewhere else None,
        }
        self._report(self.result)

    def line(self, r: dict[str, Any]) -> str:
        """'probe (3 steps): memory 20.1 GiB peak (21.0 reserved) vs 21.5 predicted (-7%); speed ...'."""
        return probe_line(r)

    def _report(self, r: dict[str, Any]) -> None:
        out = self.stream or sys.stderr
        print(self.line(r), file=out, flush=True)
        slow = r["predicted_tokens_per_s"] and r["tokens_per_s"] < SLOW * r["predicted_tokens_per_s"]
        if slow:
            r["slow_cause"] = slow_cause(self.data_wait(), on_gpu=r["gpu"] is not None)
            print(f"warning: measured speed is {_pct(r['tokens_per_s'], r['predicted_tokens_per_s'])} against the "
                  f"prediction; likely cause: {r['slow_cause']}", file=out, flush=True)
        if self.run is not None:
            self.run.event("probe", r)
            fields: dict[str, Any] = {"tokens_per_s": r["tokens_per_s"]}
            if r["device_used"] is not None:
                fields["peak_mem_measured"] = r["device_used"]
            if r["gpu"]:
                fields["gpu"] = r["gpu"]
            self.run.update(**fields)


def fresh_peak(cfg: Any) -> int | None:
    """Without a plan, the memory estimate for this config (device total), on CUDA only: elsewhere there
    is no peak to compare it with. Never stops the run: a failed estimate leaves the probe unpredicted."""
    import torch

    if not torch.cuda.is_available():
        return None
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

    try:
        est = estimate_memory(EstimateRequest(
            model=cfg.base_model, method=cfg.method, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
            lora_targets=cfg.lora_targets, micro_batch=cfg.micro_batch_size, seq_len=cfg.sequence_len,
            precision=cfg.precision, grad_ckpt=cfg.gradient_checkpointing))
    except Exception as err:  # noqa: BLE001 - a prediction must never stop the run it predicts
        print(f"probe: no memory prediction ({type(err).__name__}: {err})", file=sys.stderr, flush=True)
        return None
    return est.device_total_bytes
