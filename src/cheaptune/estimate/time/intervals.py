"""p10-p90 of training time from the step-time model's leave-one-source-out residuals on public rows.

Why residuals and not one spread: the model is better on some jobs than others (one A100 LoRA vs 70B FSDP on
GeForce boards), so a plan's interval comes from the held-out errors of the rows most like it: the same board
class, method and GPU count, of the plan's own trainer stack. Where fewer than MIN_ROWS rows (from MIN_SOURCES
sources: one benchmark's rows share its conditions) match, it falls back
to a looser match (the method class on that many GPUs, then any stack's rows, then the method class, then every
row) and widens the band by WIDEN per step, and says why: a configuration no row supports does not inherit the confidence of the ones that do. The residuals are
ln(measured time / predicted time) per row, written by bench/throughput_accuracy.py --write-data into
data/time_residuals.json with one factor on every band's width, `widen` (split-conformal: the 80th percentile of
how far outside its band each held-out row falls), so that about 80% of held-out rows fall inside. The bench checks
that share with the factor itself refitted without each source, so no source sets the width it is scored by.
A multi-GPU job on a serial link (ethernet between nodes, or boards without usable peer-to-peer:
scaling.serial_link) is timed with its transfers unhidden, unlike NVLink or InfiniBand rows: before pooling rows of
other boards it looks for pooled rows on such links, and where none match it takes the other rows one step wider
and says so.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from pathlib import Path
from typing import Any

from cheaptune.estimate.time import scaling

DATA = Path(__file__).parents[1] / "data" / "time_residuals.json"
MIN_ROWS = 5  # fewer matching rows than this: a looser match, widened
MIN_SOURCES = 2  # rows of one source are one benchmark's conditions: a band needs two sources
WIDEN = 1.25  # each looser step widens the band around its median by this factor
FLOOR = 0.05  # the band is at least +-5% around its median: no public row is that exact twice


def board_class(gpu: Any) -> str:
    """Boards that behave alike for the model: datacenter HBM boards by generation, the rest by tier. Hopper and
    Blackwell are "hopper+" only in the datacenter tier (gpus.yaml `tier`): a professional Blackwell board (RTX PRO
    6000: PCIe, GDDR7, 1.8 TB/s) is a workstation card like the RTX 6000 Ada, not an H100/B200 (3.35-7.7 TB/s HBM)."""
    tier, arch = getattr(gpu, "tier", "datacenter"), getattr(gpu, "arch", "")
    if getattr(gpu, "vendor", "nvidia") != "nvidia":
        return "amd"
    if tier == "consumer":
        return "geforce"
    if tier == "datacenter" and arch in ("hopper", "blackwell"):
        return "hopper+"
    if arch == "ampere" and getattr(gpu, "interconnect", "pcie") in ("sxm", "nvlink") or gpu.name.startswith("A100"):
        return "a100"
    return f"{tier}-{arch}"  # professional/datacenter Ampere and Ada PCIe boards, Turing, Volta


def method_class(method: str) -> str:
    return "full" if method == "full" else "adapter"


def gpu_class(n: int) -> str:
    return "1" if n == 1 else "2-4" if n <= 4 else "5+"


def residual_rows(rows: list[dict]) -> list[dict]:
    """Rows as (board class, method, gpus, stack, serial link, log time ratio): from the data file's rows or the
    bench's results (`serial_link`: scaling.serial_link of the row's layout; absent is False)."""
    out = []
    for r in rows:
        ratio = r.get("log_time_ratio")
        if ratio is None:
            ratio = math.log(r["loso"] / r["measured"])
        out.append({"board_class": r.get("board_class") or r["gpu_arch_class"], "method": r["method"],
                    "gpus": int(r["gpus"]), "stack": r.get("stack", ""), "source": r.get("source", ""),
                    "log_time_ratio": float(ratio), "serial_link": bool(r.get("serial_link", False))})
    return out


@functools.cache
def _loaded(path: Path = DATA) -> tuple[tuple[dict, ...], float]:
    """The residual rows and the factor on every band's width that holds 80% of held-out rows (`widen`)."""
    if not path.exists():
        return (), 1.0
    doc = json.loads(path.read_text())
    return tuple(residual_rows(doc["rows"])), float(doc.get("widen", 1.0))


def widened(lo: float, mid: float, hi: float, k: float) -> tuple[float, float]:
    """The band's two half-widths around its median times k."""
    return mid - (mid - lo) * k, mid + (hi - mid) * k


def needed_scale(x: float, lo: float, mid: float, hi: float) -> float:
    """By how much the band's half-width on x's side must grow to hold x (<= 1: it already does)."""
    return (x - mid) / max(hi - mid, 1e-9) if x >= mid else (mid - x) / max(mid - lo, 1e-9)



def log_band(rows: list[dict] | tuple[dict, ...], board: str, method: str, gpus: int,
             stack: str = "hf", serial_link: bool = False) -> tuple[float, float, float, str]:
    """(p10, p50, p90) of ln(measured / predicted time) for a job like this, and where it came from: rows of the
    plan's own trainer stack first (another stack's errors are not this one's), then any stack, widened; a
    multi-GPU job pools other multi-GPU rows before single-GPU ones (one GPU's errors hold no communication). A
    serial-link multi-GPU job tries the other boards' serial-link rows before all of them, one step each."""
    cls, n = method_class(method), gpu_class(gpus)
    staged = serial_link and gpus > 1
    # (match, what, serial_first): the levels that pool any board's rows of the job's method class on its GPU-count
    # class, which a serial-link job tries first on serial-link rows only
    levels = [(lambda r: (r["board_class"], r["method"], gpu_class(r["gpus"]), r["stack"]) == (board, method, n, stack),
               f"{stack} rows of {board} {method} on {n} GPU(s)", False),
              (lambda r: (method_class(r["method"]), gpu_class(r["gpus"]), r["stack"]) == (cls, n, stack),
               f"{stack} rows of any board, {cls} on {n} GPU(s)", True),
              (lambda r: (r["board_class"], r["method"], gpu_class(r["gpus"])) == (board, method, n),
               f"any stack's rows of {board} {method} on {n} GPU(s)", False),
              (lambda r: (method_class(r["method"]), gpu_class(r["gpus"])) == (cls, n),
               f"any stack, any board, {cls} on {n} GPU(s)", True),
              (lambda r: (method_class(r["method"]), r["gpus"] > 1) == (cls, gpus > 1),
               f"any stack, any board, {cls} on {'several GPUs' if gpus > 1 else 'one GPU'}", False),
              (lambda r: method_class(r["method"]) == cls, f"any stack, any board, {cls}", False),
              (lambda r: True, "every public row", False)]
    levels = [lv for match, what, serial_first in levels for lv in (
        [((lambda r, m=match: m(r) and r.get("serial_link", False)), f"{what}, on serial links"), (match, what)]
        if staged and serial_first else [(match, what)])]
    for step, (match, what) in enumerate(levels):
        hits = [r for r in rows if match(r)]
        got = sorted(r["log_time_ratio"] for r in hits)
        enough = len(got) >= MIN_ROWS and len({r["source"] for r in hits}) >= MIN_SOURCES
        if enough or (step == len(levels) - 1 and len(got) >= 2):
            q = statistics.quantiles(got, n=10, method="inclusive")
            mid, half = statistics.median(got), max((q[-1] - q[0]) / 2, FLOOR) * WIDEN ** step
            lo, hi = min(q[0], mid - half), max(q[-1], mid + half)
            why = (f"from {len(got)} held-out public rows ({what})" if step == 0 else
                   f"no {MIN_ROWS} {stack} rows of {MIN_SOURCES}+ sources for {board} {method} on {n} GPU(s): from "
                   f"{len(got)} held-out "
                   f"rows ({what}), widened x{WIDEN ** step:.2f}")
            if staged and step and not any(r.get("serial_link") for r in hits):
                why += "; none of them on a serial link (ethernet between nodes, or no usable peer-to-peer)"
            return lo, mid, hi, why
    return -0.4, 0.0, 0.4, "no public rows: a default band of x0.67-x1.5"


def time_band(gpu: Any, method: str, gpus: int, rows: tuple[dict, ...] | None = None,
              stack: str = "hf", serial_link: bool | None = None) -> tuple[float, float, float, str]:
    """(p10, p50, p90) factors on the predicted training time of `method` on `gpus` x `gpu` with `stack` (the
    bench's fitting stack: cheaptune's runs are fitted as hf), and the basis. `serial_link` (scaling.serial_link of
    the job's layout) defaults to that of one node of `gpus` boards."""
    data, k = _loaded() if rows is None else (rows, 1.0)
    staged = scaling.serial_link(scaling.Layout(gpus), gpu) if serial_link is None else serial_link
    lo, mid, hi, why = log_band(data, board_class(gpu), method, gpus, stack, staged)
    lo, hi = widened(lo, mid, hi, k)
    return math.exp(lo), math.exp(mid), math.exp(hi), why + (f"; x{k:.2f} wider, so 8 in 10 held-out rows fall inside"
                                                             if k > 1 else "")
