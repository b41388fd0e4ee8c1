"""Data-parallel scaling: how much of N GPUs' paid time turns into training, from published figures.

Efficiency = throughput of N GPUs / (N x one GPU). It falls with GPU count, more over PCIe than over
NVLink, more again across nodes, and more for full sharding (FSDP/ZeRO-3 move 1.5x DDP's bytes).
The planner multiplies one GPU's tokens/s by N x efficiency and pays for the idle rest, including
GPUs on nodes that came up early and wait for the last one. Figures: data/scaling.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from cheaptune.errors import BadInput

DATA = Path(__file__).with_name("data") / "scaling.yaml"
NETWORKS = ("infiniband", "ethernet")


@cache
def table() -> dict:
    return yaml.safe_load(DATA.read_text())


def _interp(points: dict, n: int) -> float:
    """Value at n from {count: {value}}, log-linear between published counts, flat beyond the last."""
    xs = sorted(k for k in points if isinstance(k, int))
    vals = {k: float(points[k]["value"]) for k in xs}
    if n <= 1:
        return 1.0
    lo_x, lo_v = 1, 1.0
    for x in xs:
        if n == x:
            return vals[x]
        if n < x:
            t = (math.log(n) - math.log(lo_x)) / (math.log(x) - math.log(lo_x))
            return lo_v + t * (vals[x] - lo_v)
        lo_x, lo_v = x, vals[x]
    return vals[xs[-1]]


def _link(interconnect) -> str:
    kind = getattr(interconnect, "interconnect", interconnect)  # a GpuSpec or its interconnect string
    if kind in ("nvlink", "sxm"):
        return "nvlink"
    if kind == "pcie":
        return "pcie"
    raise BadInput(f"interconnect {kind!r} is not one of nvlink, sxm, pcie")


def scaling_efficiency(gpus_per_node: int, nodes: int = 1, interconnect="nvlink", sharding: str = "ddp",
                       offload: bool = False, network: str = "infiniband") -> float:
    """Fraction (0, 1] of N x one-GPU throughput that N = gpus_per_node x nodes GPUs deliver."""
    if gpus_per_node < 1 or nodes < 1:
        raise BadInput(f"GPUs per node and nodes must be >= 1 (got {gpus_per_node}, {nodes})")
    if network not in NETWORKS:
        raise BadInput(f"network {network!r} is not one of {', '.join(NETWORKS)}")
    t = table()
    factors = t["strategy_comm_factor"]
    if sharding not in factors:
        raise BadInput(f"sharding {sharding!r} is not one of {', '.join(factors)}")
    intra = _interp(t["intra_node"]["nvlink"], gpus_per_node)
    if _link(interconnect) == "pcie" and gpus_per_node > 1:
        intra *= float(t["intra_node"]["pcie_vs_nvlink"]["value"])
    inter = _interp(t["inter_node"], nodes)
    if nodes > 1 and network == "ethernet":
        inter *= float(t["inter_node"]["ethernet_vs_infiniband"]["value"])
    ddp_eff = intra * inter
    eff = 1.0 - (1.0 - ddp_eff) * float(factors[sharding]["value"])
    if offload:
        eff *= float(t["offload_factor"]["value"])
    return max(min(eff, 1.0), 0.05)


@dataclass(frozen=True)
class ScaleOut:
    tokens_per_s: float  # all GPUs together
    efficiency: float  # of compute time, communication losses only
    idle_fraction: float  # of paid GPU time: communication waits plus nodes waiting for the last node
    gpus: int


def effective_throughput(one_gpu_tokens_per_s: float, gpus_per_node: int, nodes: int = 1, interconnect="nvlink",
                         sharding: str = "ddp", offload: bool = False, network: str = "infiniband",
                         node_wait_s: float = 0.0, compute_s: float | None = None) -> ScaleOut:
    """Tokens/s of the whole job and the idle fraction of what is paid for.

    node_wait_s: how long the earliest nodes are billed before the last one joins the rendezvous;
    compute_s: the job's training wall time (needed to weigh that wait; without it the wait is ignored).
    """
    if one_gpu_tokens_per_s <= 0:
        raise BadInput(f"one-GPU throughput must be > 0 tokens/s (got {one_gpu_tokens_per_s})")
    eff = scaling_efficiency(gpus_per_node, nodes, interconnect, sharding, offload, network)
    gpus = gpus_per_node * nodes
    paid = useful = 1.0
    if compute_s and compute_s > 0 and nodes > 1 and node_wait_s > 0:
        waiting = (nodes - 1) * gpus_per_node * node_wait_s
        paid = gpus * compute_s + waiting
        useful = gpus * compute_s
    idle = 1.0 - eff * useful / paid
    return ScaleOut(one_gpu_tokens_per_s * gpus * eff, eff, idle, gpus)
