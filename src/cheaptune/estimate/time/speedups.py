"""Throughput factors of the trainer's speed options (Liger kernels, torch.compile, 8-bit/paged optimizers),
read from estimate/data/speedups.yaml, where each carries its published source and what the memory
estimate does and does not simulate for it. Pure over the data file, so plan and tests read one table.
A plan prices an option only where its factor was measured for the job's method class (full vs adapter) on
the board's vendor and arch (`measured` in the data file); elsewhere it is "possible, unmeasured".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parents[1] / "data" / "speedups.yaml"


@cache
def table() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text())["options"]


@dataclass(frozen=True)
class Speedup:
    factor: float  # multiplies the step-time model's tokens/s: the measured factors of `priced` only
    options: tuple[str, ...]  # the options on, in table order
    sources: tuple[str, ...]
    not_simulated: tuple[str, ...]  # memory effects the estimate cannot simulate (it errs high)
    priced: tuple[str, ...] = ()  # the options on whose factor counts (measured for this job and board)
    unmeasured: tuple[str, ...] = ()  # options that run on the board but were never measured for this job


def _combined(factors: dict[str, float]) -> float:
    """Options of one `overlaps` group speed up the same ops: the best one counts; groups multiply."""
    best: dict[str, float] = {}
    for name, value in factors.items():
        group = table()[name].get("overlaps", name)
        best[group] = max(best.get(group, 0.0), value)
    factor = 1.0
    for value in best.values():
        factor *= value
    return factor


def speedup(liger_kernel: bool = False, torch_compile: bool = False, optimizer: str = "adamw") -> Speedup:
    """The combined published factor of the options on, each one's source, and the memory notes the estimate owes."""
    on = {"liger_kernel": liger_kernel, "torch_compile": torch_compile, "adamw-8bit": optimizer == "adamw-8bit",
          "paged-adamw-8bit": optimizer == "paged-adamw-8bit"}
    names = tuple(name for name in table() if on.get(name))
    return Speedup(factor=_combined({n: float(table()[n]["factor"]) for n in names}), options=names,
                   sources=tuple(table()[n]["source"] for n in names), priced=names,
                   not_simulated=tuple(f"{n}: {table()[n]['memory']}" for n in names
                                       if table()[n]["memory"].startswith("not simulated")))


# The options the planner may turn on by itself (the optimizer changes memory, so the fit decides it).
PLANNED = ("liger_kernel", "torch_compile")


def method_class(method: str) -> str:
    """full | adapter: what a speed option's measurement holds for (the backward differs)."""
    return "full" if method == "full" else "adapter"


def runs_on(gpu: Any, name: str) -> bool:
    """Can option `name` run on `gpu`: an NVIDIA CUDA board at or above the option's compute capability."""
    need = table()[name].get("min_compute_capability")
    cc = getattr(gpu, "compute_capability", None)
    if getattr(gpu, "vendor", "nvidia") != "nvidia" or not getattr(gpu, "cuda", True) or need is None or not cc:
        return False
    return float(cc) >= float(need)


def measured_factor(gpu: Any, name: str, method: str) -> float | None:
    """The factor of option `name` measured for this method class on this vendor and arch; None if never."""
    for m in table()[name].get("measured", ()):
        if (m["method_class"], m["vendor"], m["arch"]) == (method_class(method), getattr(gpu, "vendor", "nvidia"),
                                                           getattr(gpu, "arch", "")):
            return float(m["factor"])
    return None


def for_gpu(gpu: Any, method: str, enabled: bool | tuple[str, ...] = True) -> Speedup:
    """The speed options a run of `method` has on `gpu`, priced only where measured for that method class on that
    vendor and arch. `enabled` true: the planner's choice, each in PLANNED that runs there and was measured there
    with a factor above 1 (the rest are `unmeasured`, off); false: none (plan --no-speedups); a tuple: exactly
    the options a config fixes, each where it runs, priced without the factors never measured for this job."""
    runnable = [n for n in PLANNED if runs_on(gpu, n)]
    measured = {n: f for n in runnable if (f := measured_factor(gpu, n, method)) is not None}
    if isinstance(enabled, tuple):
        names = tuple(n for n in runnable if n in enabled)
    else:
        names = tuple(n for n in runnable if enabled and measured.get(n, 0.0) > 1)
    priced = tuple(n for n in names if n in measured)
    return Speedup(factor=_combined({n: measured[n] for n in priced}), options=names,
                   sources=tuple(table()[n]["source"] for n in names), priced=priced,
                   unmeasured=tuple(n for n in runnable if n not in measured),
                   not_simulated=tuple(f"{n}: {table()[n]['memory']}" for n in names
                                       if table()[n]["memory"].startswith("not simulated")))


def _url(source: str) -> str:
    found = re.search(r"https?://[^\s)]+", source)
    return found.group(0).rstrip(".,") if found else source


def describe(s: Speedup) -> str:
    """One line naming the options on, each with its measured gain and source (empty when none is)."""
    if not s.priced:
        return ""
    parts = [f"{n} x{float(table()[n]['factor']):.2f} ({_url(table()[n]['source'])})" for n in s.priced]
    shared = len({table()[n].get("overlaps", n) for n in s.priced}) < len(s.priced)
    return (f"speed-ups on: {', '.join(parts)}; together x{s.factor:.2f} tokens/s"
            + (" (they fuse the same ops, so their gains are not multiplied)" if shared else "")
            + " (plan --no-speedups turns them off)")


def describe_unmeasured(s: Speedup, method: str, gpu: Any) -> str:
    """One line for the options that run on the board but were never measured for this job: possible, with
    the published figure and its conditions, and not in the price (empty when there are none)."""
    if not s.unmeasured:
        return ""
    parts = [f"{n} x{float(table()[n]['factor']):.2f} ({table()[n]['conditions']}; {_url(table()[n]['source'])})"
             for n in s.unmeasured]
    on = [n for n in s.unmeasured if n in s.options]
    return (f"possible, unmeasured for {method_class(method)} fine-tunes on {getattr(gpu, 'vendor', 'nvidia')} "
            f"{getattr(gpu, 'arch', '?')}: {'; '.join(parts)}; "
            + (f"{', '.join(on)} on as the config asks, priced without its factor" if on else "off, not priced"))
