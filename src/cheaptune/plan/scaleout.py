"""Stage 1b: candidates on several GPUs, for the methods one GPU does not serve.

Several GPUs are tried only for a method that fits no single GPU, misses --deadline or --budget on every
single GPU, or under --optimize time (what `plan --max-gpus` and docs/plan.md promise): one GPU that
serves the method is what a user can run without a distributed launcher, and N GPUs of a kind pay N
times for scaling efficiency below 1. The planner still prunes what it tries by a lower bound on cost
(planner._best_case). Several nodes (8 GPUs each) come in only when one node of 8 cannot serve the
method. Shardings are tried from the fastest that fits: DDP (whole model state per GPU), then ZeRO-3,
then FSDP. CPU offload is the last resort, tried only when no GPU count fits without it: it needs host
RAM for the node's share of the model state (about 16 bytes per parameter for a full fine-tune), which
the price files do not state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cheaptune.plan.candidates import (
    Exclusion,
    FitOutcome,
    GpuFit,
    MultiFitFn,
    gib,
    hardware_problem,
    run_precision,
)
from cheaptune.plan.pricing import Option
from cheaptune.plan.workload import Constraints

GPUS_PER_NODE = (2, 4, 8)
NODE_SIZE = 8  # multi-node jobs use 8-GPU instances
SHARDINGS = (("ddp", False), ("zero3", False), ("fsdp", False))
OFFLOAD = (("fsdp", True),)
# (several nodes?, shardings) in the order they are tried for methods still unserved
STAGES = ((False, SHARDINGS), (True, SHARDINGS), (False, OFFLOAD), (True, OFFLOAD))
WHY_KINDS = ("memory", "hardware", "deadline")


@dataclass(frozen=True)
class Candidate:
    """A method on `nodes` instances of `gpus_per_node` x `gpu`, and the offers that rent such an instance."""

    method: str
    gpu: Any
    gpus_per_node: int
    nodes: int
    offers: tuple[Any, ...]

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def methods_needing(c: Constraints, feasible: list[Option], excluded: list[Exclusion],
                    pruned: Counter) -> dict[str, str]:
    """Methods to try on several GPUs, each with the reason shown in the plan's notes: those no single GPU
    serves (memory, hardware, deadline, budget), and every method under --optimize time."""
    if c.max_gpus < 2:
        return {}
    served = {o.method for o in feasible} | {m for m, n in pruned.items() if n}
    need: dict[str, str] = {}
    for m in c.methods:
        kinds = {e.kind for e in excluded if e.option.get("method") == m}
        if m not in served and "deadline" in kinds:
            need[m] = "misses the deadline on one GPU"
        elif m not in served and "budget" in kinds:
            need[m] = "over the budget on one GPU"
        elif m not in served and kinds & {"memory", "hardware"}:
            need[m] = "fits no single GPU"
        elif c.optimize == "time":
            need[m] = "more GPUs finish sooner (--optimize time)"
    return need


def fitted(excluded: list[Exclusion]) -> set[str]:
    """Methods some GPU count holds without offload: only the budget or the deadline excluded them, and
    offloading (slower, same GPUs) never brings them in."""
    return {e.option.get("method") for e in excluded if e.kind in ("budget", "deadline")}


def candidates(methods: Iterable[str], gpus: Iterable[Any], offers: Iterable[Any], c: Constraints,
               effective_batch: int, multi_node: bool) -> list[Candidate]:
    """One node of 2, 4 or 8 GPUs (offers with that gpu_count), or 2, 4, ... nodes of 8 GPUs; never more
    GPUs than --max-gpus or than sequences per optimiser step (each GPU needs at least one)."""
    by_key: dict[tuple[str, int], list[Any]] = {}
    for o in offers:
        by_key.setdefault((o.gpu, o.gpu_count), []).append(o)
    limit = min(c.max_gpus, effective_batch)
    shapes = [(n, 1) for n in GPUS_PER_NODE if n <= limit] if not multi_node else \
        [(NODE_SIZE, k) for k in (2, 4, 8, 16) if NODE_SIZE * k <= limit]
    out = []
    for m in methods:
        for g in gpus:
            for per_node, nodes in shapes:
                found = by_key.get((g.name, per_node))
                if found:
                    out.append(Candidate(m, g, per_node, nodes, tuple(found)))
    return out


def fit_candidate(cand: Candidate, multi_fit: MultiFitFn, cache: dict,
                  shardings: tuple[tuple[str, bool], ...] = SHARDINGS) -> GpuFit | Exclusion:
    """The first of `shardings` (fastest first) whose per-GPU peak fits; else why none does."""
    g = cand.gpu
    option = {"method": cand.method, "gpu": g.name, "gpu_count": cand.gpus_per_node, "num_nodes": cand.nodes,
              "gpu_memory_bytes": g.memory_bytes}
    problem = hardware_problem(cand.method, g)
    if problem:
        return Exclusion(option, problem, "hardware")
    last: FitOutcome | None = None
    for sharding, offload in shardings:
        precision = run_precision(cand.method, g)
        key = (cand.method, g.memory_bytes, cand.gpus, sharding, offload, precision)
        if key not in cache:
            cache[key] = multi_fit(cand.method, g.memory_bytes, cand.gpus, sharding, offload, precision)
        last = cache[key]
        if last.fits:
            return GpuFit(cand.method, g, last, cand.gpus_per_node, cand.nodes, sharding, offload)
    tried = "/".join(sh + ("+offload" if off else "") for sh, off in shardings)
    need = f"needs {gib(last.peak_bytes)} per GPU with {tried}" if last and last.peak_bytes else "does not fit"
    label = "full fine-tune" if cand.method == "full" else cand.method
    where = f"{g.name} x{cand.gpus_per_node}" + (f" x{cand.nodes} nodes" if cand.nodes > 1 else "")
    return Exclusion(option, f"{label} on {where}: {need}, has {gib(g.memory_bytes)}", "memory")
