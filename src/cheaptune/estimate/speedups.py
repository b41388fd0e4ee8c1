"""Throughput factors of the trainer's speed options (Liger kernels, torch.compile, 8-bit/paged optimizers),
read from estimate/data/speedups.yaml, where each carries its published source and what the memory
estimate does and does not simulate for it. Pure over the data file, so plan and tests read one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data" / "speedups.yaml"


@cache
def table() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text())["options"]


@dataclass(frozen=True)
class Speedup:
    factor: float  # multiplies the step-time model's tokens/s
    options: tuple[str, ...]  # the options it comes from, in table order
    sources: tuple[str, ...]
    not_simulated: tuple[str, ...]  # memory effects the estimate cannot simulate (it errs high)


def speedup(liger_kernel: bool = False, torch_compile: bool = False, optimizer: str = "adamw") -> Speedup:
    """The combined factor of the options on, each one's source, and the memory notes the estimate owes."""
    on = {"liger_kernel": liger_kernel, "torch_compile": torch_compile, "adamw-8bit": optimizer == "adamw-8bit",
          "paged-adamw-8bit": optimizer == "paged-adamw-8bit"}
    names = tuple(name for name in table() if on.get(name))
    factor = 1.0
    for name in names:
        factor *= float(table()[name]["factor"])
    return Speedup(factor=factor, options=names, sources=tuple(table()[n]["source"] for n in names),
                   not_simulated=tuple(f"{n}: {table()[n]['memory']}" for n in names
                                       if table()[n]["memory"].startswith("not simulated")))
