"""p10-p90 of training time from the step-time model's leave-one-source-out residuals on public rows.

Why residuals and not one spread: the model is better on some jobs than others (one A100 LoRA vs 70B FSDP on
GeForce boards), so a plan's interval comes from the held-out errors of the rows most like it: the same board
class, method and GPU count, of the plan's own trainer stack. Where fewer than MIN_ROWS rows match, it falls back
to a looser match (the method class on that many GPUs, then any stack's rows, then the method class, then every
row) and widens the band by WIDEN per step, and says why: a configuration no row supports does not inherit the confidence of the ones that do. The residuals are
ln(measured time / predicted time) per row, written by bench/throughput_accuracy.py --write-data into
data/time_residuals.json; the bench prints the share of held-out rows inside their band (about 80% is the aim)
and the factor the bands would need to reach it (`needed_scale`). That factor is not applied: on today's rows it
is several-fold, driven by a few sources the model misreads (bench/results/throughput_accuracy.json), and a p90
that many times the estimate would hide the model's error rather than fix it.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "time_residuals.json"
MIN_ROWS = 5  # fewer matching rows than this: a looser match, widened
WIDEN = 1.25  # each looser step widens the band around its median by this factor
FLOOR = 0.05  # the band is at least +-5% around its median: no public row is that exact twice


def board_class(gpu: Any) -> str:
    """Boards that behave alike for the model: datacenter HBM boards by generation, the rest by tier."""
    tier, arch = getattr(gpu, "tier", "datacenter"), getattr(gpu, "arch", "")
    if getattr(gpu, "vendor", "nvidia") != "nvidia":
        return "amd"
    if tier == "consumer":
        return "geforce"
    if arch in ("hopper", "blackwell"):
        return "hopper+"
    if arch == "ampere" and getattr(gpu, "interconnect", "pcie") in ("sxm", "nvlink") or gpu.name.startswith("A100"):
        return "a100"
    return f"{tier}-{arch}"  # professional/datacenter Ampere and Ada PCIe boards, Turing, Volta


def method_class(method: str) -> str:
    return "full" if method == "full" else "adapter"


def gpu_class(n: int) -> str:
    return "1" if n == 1 else "2-4" if n <= 4 else "5+"


def residual_rows(rows: list[dict]) -> list[dict]:
    """Rows as (board class, method, gpus, stack, log time ratio): from the data file's rows or the bench's results."""
    out = []
    for r in rows:
        ratio = r.get("log_time_ratio")
        if ratio is None:
            ratio = math.log(r["loso"] / r["measured"])
        out.append({"board_class": r.get("board_class") or r["gpu_arch_class"], "method": r["method"],
                    "gpus": int(r["gpus"]), "stack": r.get("stack", ""), "log_time_ratio": float(ratio)})
    return out


@functools.cache
def _loaded(path: Path = DATA) -> tuple[dict, ...]:
    return tuple(residual_rows(json.loads(path.read_text())["rows"])) if path.exists() else ()


def needed_scale(x: float, lo: float, mid: float, hi: float) -> float:
    """By how much the band's half-width on x's side must grow to hold x (<= 1: it already does)."""
    return (x - mid) / max(hi - mid, 1e-9) if x >= mid else (mid - x) / max(mid - lo, 1e-9)



def log_band(rows: list[dict] | tuple[dict, ...], board: str, method: str, gpus: int,
             stack: str = "hf") -> tuple[float, float, float, str]:
    """(p10, p50, p90) of ln(measured / predicted time) for a job like this, and where it came from: rows of the
    plan's own trainer stack first (another stack's errors are not this one's), then any stack, widened."""
    cls, n = method_class(method), gpu_class(gpus)
    levels = [(lambda r: (r["board_class"], r["method"], gpu_class(r["gpus"]), r["stack"]) == (board, method, n, stack),
               f"{stack} rows of {board} {method} on {n} GPU(s)"),
              (lambda r: (method_class(r["method"]), gpu_class(r["gpus"]), r["stack"]) == (cls, n, stack),
               f"{stack} rows of any board, {cls} on {n} GPU(s)"),
              (lambda r: (r["board_class"], r["method"], gpu_class(r["gpus"])) == (board, method, n),
               f"any stack's rows of {board} {method} on {n} GPU(s)"),
              (lambda r: (method_class(r["method"]), gpu_class(r["gpus"])) == (cls, n),
               f"any stack, any board, {cls} on {n} GPU(s)"),
              (lambda r: method_class(r["method"]) == cls, f"any stack, any board, {cls}"),
              (lambda r: True, "every public row")]
    for step, (match, what) in enumerate(levels):
        got = sorted(r["log_time_ratio"] for r in rows if match(r))
        if len(got) >= MIN_ROWS or (step == len(levels) - 1 and len(got) >= 2):
            q = statistics.quantiles(got, n=10, method="inclusive")
            mid, half = statistics.median(got), max((q[-1] - q[0]) / 2, FLOOR) * WIDEN ** step
            lo, hi = min(q[0], mid - half), max(q[-1], mid + half)
            why = (f"from {len(got)} held-out public rows ({what})" if step == 0 else
                   f"no {MIN_ROWS} {stack} rows for {board} {method} on {n} GPU(s): from {len(got)} held-out "
                   f"rows ({what}), widened x{WIDEN ** step:.2f}")
            return lo, mid, hi, why
    return -0.4, 0.0, 0.4, "no public rows: a default band of x0.67-x1.5"


def time_band(gpu: Any, method: str, gpus: int, rows: tuple[dict, ...] | None = None,
              stack: str = "hf") -> tuple[float, float, float, str]:
    """(p10, p50, p90) factors on the predicted training time of `method` on `gpus` x `gpu` with `stack` (the
    bench's fitting stack: cheaptune's runs are fitted as hf), and the basis."""
    lo, mid, hi, why = log_band(_loaded() if rows is None else rows, board_class(gpu), method, gpus, stack)
    return math.exp(lo), math.exp(mid), math.exp(hi), why
