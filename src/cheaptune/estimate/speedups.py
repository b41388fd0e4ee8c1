"""Throughput factors of the trainer's speed options (Liger kernels, torch.compile, 8-bit/paged optimizers),
read from estimate/data/speedups.yaml, where each carries its published source and what the memory
estimate does and does not simulate for it. Pure over the data file, so plan and tests read one table.
"""

from __future__ import annotations

import re
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
    best: dict[str, float] = {}  # options of one `overlaps` group speed up the same ops: the best one counts
    for name in names:
        group = table()[name].get("overlaps", name)
        best[group] = max(best.get(group, 0.0), float(table()[name]["factor"]))
    factor = 1.0
    for value in best.values():
        factor *= value
    return Speedup(factor=factor, options=names, sources=tuple(table()[n]["source"] for n in names),
                   not_simulated=tuple(f"{n}: {table()[n]['memory']}" for n in names
                                       if table()[n]["memory"].startswith("not simulated")))


# The options the planner may turn on by itself (the optimizer changes memory, so the fit decides it).
PLANNED = ("liger_kernel", "torch_compile")


def runs_on(gpu: Any, name: str) -> bool:
    """Can option `name` run on `gpu`: an NVIDIA CUDA board at or above the option's compute capability."""
    need = table()[name].get("min_compute_capability")
    cc = getattr(gpu, "compute_capability", None)
    if getattr(gpu, "vendor", "nvidia") != "nvidia" or not getattr(gpu, "cuda", True) or need is None or not cc:
        return False
    return float(cc) >= float(need)


def for_gpu(gpu: Any, enabled: bool | tuple[str, ...] = True) -> Speedup:
    """The speed options a run has on `gpu`. `enabled` true: the planner's choice, each in PLANNED that runs
    there and whose factor is above 1; false: none (plan --no-speedups); a tuple: exactly the options a
    config fixes (plan --config), each where it runs, so its run is priced at its own speed."""
    if isinstance(enabled, tuple):
        return speedup(**{name: name in enabled and runs_on(gpu, name) for name in PLANNED})
    on = {name: enabled and runs_on(gpu, name) and float(table()[name]["factor"]) > 1 for name in PLANNED}
    return speedup(**on)


def _url(source: str) -> str:
    found = re.search(r"https?://[^\s)]+", source)
    return found.group(0).rstrip(".,") if found else source


def describe(s: Speedup) -> str:
    """One line naming the options on, each with its expected gain and source (empty when none is)."""
    if not s.options:
        return ""
    parts = [f"{n} x{float(table()[n]['factor']):.2f} ({_url(table()[n]['source'])})" for n in s.options]
    shared = len({table()[n].get("overlaps", n) for n in s.options}) < len(s.options)
    return (f"speed-ups on: {', '.join(parts)}; together x{s.factor:.2f} tokens/s"
            + (" (they fuse the same ops, so their gains are not multiplied)" if shared else "")
            + " (plan --no-speedups turns them off)")
