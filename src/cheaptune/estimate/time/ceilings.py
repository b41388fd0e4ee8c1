"""A plausibility guard: no planned speed above the best MFU any public run reached for that method class.

Why: the step-time model times its speed options can promise an MFU no one has measured (a 4-bit LoRA step at
63% of an H100's peak); a plan built on that under-prices the job. The ceilings are the best published MFU per
(board, method class) over bench/data/throughput_public.csv (data/mfu_ceilings.yaml, each with its row, URL and
source date, written by bench/throughput_accuracy.py --write-data). A board without a row of that class takes
the best share of the measured matmul rate any board reached for the class, at its own matmul rate, and says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

DATA = Path(__file__).parents[1] / "data" / "mfu_ceilings.yaml"


def method_class(method: str) -> str:
    return "full" if method == "full" else "adapter"


@functools.cache
def table(path: Path = DATA) -> dict[str, dict]:
    try:
        return dict(yaml.safe_load(path.read_text())["ceilings"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise BadInput(f"{path}: not a valid MFU-ceiling table ({err}); restore it from the package") from None


@dataclass(frozen=True)
class Ceiling:
    mfu: float
    row: str
    source: str
    url: str
    own_board: bool  # False: no public row on this board for the class; the best of any board

    def line(self, board: str, cls: str) -> str:
        where = "" if self.own_board else (f" (no public {cls} row on {board}: the best share of the measured matmul "
                                           f"rate on any board, at {board}'s)")
        return f"MFU capped at {self.mfu:.0%}, the best published for {cls} fine-tunes{where}: row {self.row}, {self.url}"


def ceiling(gpu: Any, method: str) -> Ceiling:
    """The best published MFU for `method`'s class on `gpu`; without a row there, the best share of the measured
    matmul rate of any board, times this board's measured matmul fraction."""
    from cheaptune.estimate.time import throughput as tp

    cls, rows = method_class(method), table()
    own = rows.get(f"{gpu.name}/{cls}")
    if own:
        return Ceiling(float(own["mfu"]), own["row"], own["source"], own["url"], True)
    best = max((v for k, v in rows.items() if k.endswith(f"/{cls}")), key=lambda v: v["of_gemm"])
    gemm = tp.sustained_rate(gpu, "bf16", tp.load_table()) / tp.peak_flops(gpu)[0]
    return Ceiling(float(best["of_gemm"]) * gemm, best["row"], best["source"], best["url"], False)


def capped(tokens_per_s: float, mfu: float, gpu: Any, method: str) -> tuple[float, str]:
    """(tokens/s no faster than the ceiling allows, the line saying so, empty when not capped)."""
    c = ceiling(gpu, method)
    if mfu <= c.mfu:
        return tokens_per_s, ""
    return tokens_per_s * c.mfu / mfu, c.line(gpu.name, method_class(method))
