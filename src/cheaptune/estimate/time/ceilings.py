"""A plausibility guard: no planned speed above the best share of the matmul rate any public run reached.

Why: the step-time model times its speed options can promise an MFU no one has measured (a 4-bit LoRA step at
63% of an H100's peak); a plan built on that under-prices the job. The evidence is the best published MFU per
(board, method class) over bench/data/throughput_public.csv (data/mfu_ceilings.yaml, each with its row, URL and
source date, written by bench/throughput_accuracy.py --write-data). The rule is applied here, at read time, so it
holds whatever the data: a row's share is its MFU over its board's measured matmul fraction (steptime.yaml
sustained_fraction); a board's ceiling is the best share of its architecture class (estimate.time.intervals
.board_class) times its own matmul fraction. A class with rows on fewer than MIN_BOARDS boards takes the best
share of any board, since one board's best is one run, not a bound. So the ceiling is never below a row on the
board, a board with fewer rows is never held tighter than the rest of its class, and of two boards in one class
the one with the higher sustained rate always gets the higher capped speed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

DATA = Path(__file__).parents[1] / "data" / "mfu_ceilings.yaml"
MIN_BOARDS = 2  # boards of a class with a row before the class's own best share bounds it


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
    share: float  # of the board's measured matmul rate (mfu = share x the board's matmul fraction)
    row: str
    row_board: str  # the board the row that set the share ran on
    source: str
    url: str
    scope: str  # the architecture class whose rows set the share, or "any" (too few boards of its class)

    def line(self, board: str, cls: str) -> str:
        where = f"{self.scope} boards" if self.scope != "any" else "any board (too few boards of its class have a row)"
        return (f"MFU capped at {self.mfu:.0%}: {self.share:.0%} of {board}'s measured matmul rate, the best share "
                f"published for {cls} fine-tunes on {where}: row {self.row} on {self.row_board}, {self.url}")


def _matmul_fraction(gpu: Any) -> float:
    """The board's measured sustained matmul rate over its datasheet peak (steptime.yaml sustained_fraction)."""
    from cheaptune.estimate.time import throughput as tp

    return tp.sustained_rate(gpu, "bf16", tp.load_table()) / tp.peak_flops(gpu)[0]


@functools.cache
def _shares(cls: str, path: Path = DATA) -> tuple[tuple[str, str, float, str], ...]:
    """(architecture class, board, share of its measured matmul rate, table key) of each board's best `cls` row;
    a row faster than its board's measured matmul rate is not physical for a whole step and bounds nothing."""
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.estimate.time.intervals import board_class

    out = []
    for key, entry in table(path).items():
        board, kind = key.split("/")
        if kind == cls:
            gpu = resolve_gpu(board)
            share = float(entry["mfu"]) / _matmul_fraction(gpu)
            if share <= 1:
                out.append((board_class(gpu), board, share, key))
    return tuple(out)


def ceiling(gpu: Any, method: str, path: Path = DATA) -> Ceiling:
    """The most MFU a plan may show for `method` on `gpu`: the best share of the measured matmul rate published
    on its architecture class (any board's, when fewer than MIN_BOARDS of the class have a row) at its own rate."""
    from cheaptune.estimate.time.intervals import board_class

    cls, arch = method_class(method), board_class(gpu)
    rows = _shares(cls, path)
    if not rows:
        raise BadInput(f"{path}: no {cls} ceiling rows; restore it from the package")
    mine = [r for r in rows if r[0] == arch]
    pool, scope = (mine, arch) if len({r[1] for r in mine}) >= MIN_BOARDS else (rows, "any")
    _, board, share, key = max(pool, key=lambda r: r[2])
    entry = table(path)[key]
    return Ceiling(share * _matmul_fraction(gpu), share, entry["row"], board, entry["source"], entry["url"], scope)


def capped(tokens_per_s: float, mfu: float, gpu: Any, method: str) -> tuple[float, str]:
    """(tokens/s no faster than the ceiling allows, the line saying so, empty when not capped)."""
    c = ceiling(gpu, method)
    if mfu <= c.mfu:
        return tokens_per_s, ""
    return tokens_per_s * c.mfu / mfu, c.line(gpu.name, method_class(method))
