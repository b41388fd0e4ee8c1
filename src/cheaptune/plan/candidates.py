"""Stage 1: which (method, GPU) pairs fit in memory. One fit per (method, memory size), not per GPU.

`fit` is passed in (the real one wraps estimate.memory.fit_micro_batch), so tests use a fake. A fit
reports the micro-batch the plan will run (see `planned_micro`) and the peak AT that micro-batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cheaptune.errors import BadInput

GIB = 1024**3
WEIGHTS_FLOOR = "weights floor"  # FitOutcome.basis of a fit refused below microsearch.weights_floor


@dataclass(frozen=True)
class FitOutcome:
    """What the memory estimator says for one method on one memory size."""

    fits: bool
    micro_batch: int = 0
    grad_ckpt: bool = False
    peak_bytes: int = 0  # device total at the chosen setting; when it does not fit: the least it needs
    trainable_params: int = 0
    total_params: int = 0
    basis: str = ""
    precompute_ref: bool = False  # dpo: reference log-probs computed before training instead of a frozen copy
    note: str = ""  # why the fit chose what it did (dpo full: reference copy or precomputed)


# The precision argument is the one the run will use on that GPU (estimate.policy.training_precision):
# a board without bf16 trains fp16-mixed, which holds fp32 master weights, so it is fitted as such.
FitFn = Callable[[str, int, str], FitOutcome]  # (method, gpu_memory_bytes, precision) -> outcome
# (method, gpu_memory_bytes, total GPUs, sharding, offload, precision) -> per-GPU outcome
MultiFitFn = Callable[[str, int, int, str, bool, str], FitOutcome]


def run_precision(method: str, gpu: Any) -> str:
    """The precision `method` trains at on `gpu`: what the fit simulates and the plan file stores."""
    from cheaptune.estimate.policy import training_precision

    return training_precision(method, bool(getattr(gpu, "bf16", True)))


def planned_micro(largest: int, effective_batch: int, gpus: int = 1) -> tuple[int, int]:
    """(micro-batch per GPU, accumulation steps) for the effective batch, given the largest micro-batch
    that fits: as few steps as the largest allows, then the smallest micro-batch that keeps that many
    steps (least overshoot of the effective batch, and less memory than the largest)."""
    per_gpu = max(1, math.ceil(effective_batch / max(gpus, 1)))
    accum = math.ceil(per_gpu / max(1, min(largest, per_gpu)))
    return math.ceil(per_gpu / accum), accum


@dataclass(frozen=True)
class GpuFit:
    method: str
    gpu: Any  # GpuSpec
    fit: FitOutcome
    gpus_per_node: int = 1
    nodes: int = 1
    sharding: str | None = None  # None on one GPU; ddp | zero3 | fsdp on several
    offload: bool = False

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Exclusion:
    option: dict[str, Any]
    reason: str
    kind: str  # memory | hardware | model (the method cannot train this model) | budget | deadline | offers


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def hardware_problem(method: str, gpu: Any) -> str | None:
    """Things memory cannot fix: no 4-bit kernels for QLoRA on this board."""
    if method == "qlora" and not getattr(gpu, "bnb_4bit", True):
        return f"qlora on {gpu.name}: bitsandbytes 4-bit kernels do not support this GPU"
    return None


def fit_key(method: str, gpu: Any) -> tuple[str, int, str] | None:
    """The fit `fit_pair` asks for: (method, memory size, precision); None where the hardware rules it out."""
    return None if hardware_problem(method, gpu) else (method, gpu.memory_bytes, run_precision(method, gpu))


def fit_pair(
    method: str, gpu: Any, fit: FitFn, headroom: float, cache: dict[tuple[str, int, str], FitOutcome]
) -> GpuFit | Exclusion:
    """Does `method` fit on `gpu`? `cache` shares one fit among GPUs of the same memory size."""
    option = {"method": method, "gpu": gpu.name, "gpu_count": 1, "gpu_memory_bytes": gpu.memory_bytes}
    problem = hardware_problem(method, gpu)
    if problem:
        return Exclusion(option, problem, "hardware")
    precision = run_precision(method, gpu)
    key = (method, gpu.memory_bytes, precision)
    if key not in cache:
        try:
            cache[key] = fit(method, gpu.memory_bytes, precision)
        except BadInput as err:  # the method cannot run this model at all (e.g. QLoRA with a 16-bit base)
            cache[key] = str(err)
    out = cache[key]
    if isinstance(out, str):
        return Exclusion(option, out, "model")
    if out.fits:
        return GpuFit(method, gpu, out)
    need = f"needs {gib(out.peak_bytes)}" if out.peak_bytes else "does not fit"
    if out.basis == WEIGHTS_FLOOR:
        held = "16-bit weights and their gradients" if method == "full" else "16-bit weights"
        need = f"needs more than {gib(out.peak_bytes)} (its {held} alone, with the CUDA context)"
    if 0 < out.peak_bytes <= gpu.memory_bytes:
        need += f" plus {headroom:.0%} headroom"
    label = "full fine-tune" if method == "full" else method
    return Exclusion(option, f"{label} on {gpu.name}: {need}, has {gib(gpu.memory_bytes)}", "memory")
