"""Communication of data-parallel training: bytes each sharding strategy sends, over which link.

Why bytes and not an efficiency table: what DDP sends is the trainable gradients (a LoRA adapter's
are a few MB, a full fine-tune's are the whole model), FSDP/ZeRO-3 gather the stored weights every
micro-step (0.56 B per weight for a 4-bit base, 2 B for bf16) and scatter the gradients, and CPU
offload moves the shard over PCIe to the host. Time = bytes / the link's bandwidth (NVLink, PCIe without
peer-to-peer on GeForce and on the boards data/interconnect.yaml names, the network between nodes), then hidden behind compute as far as the strategy
overlaps (`exposed_seconds`). Ring collectives over all n ranks: all-reduce moves 2(n-1)/n of the data,
all-gather and reduce-scatter (n-1)/n, at the bus bandwidth of the ring's slowest hop (NVIDIA/nccl-tests@03a204a
doc/PERFORMANCE.md: t = S(n-1)/(nB), B "the hardware bottleneck: NVLink, PCI, QPI, or network"). Across nodes
that hop is the node's NIC: every ring crossing the node boundary shares it, so it carries (n-1)/n of the data
for all n ranks, not (nodes-1)/nodes as a two-level (intra, then inter) sum would; measured busbw sits at the
node's NIC total (NVIDIA/nccl-tests#119: 3 nodes x 8 A100, 4x 200 Gbit/s each, 85-96 of 100 GB/s). NCCL may
all-reduce by tree across nodes, above the NIC rate on 2 nodes (NVIDIA/nccl#837), so DDP's ring time errs slow.
Constants: data/steptime.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

INTERCONNECT = Path(__file__).resolve().parent.parent / "data" / "interconnect.yaml"

NETWORKS = ("ethernet", "infiniband")
SHARDINGS = ("ddp", "zero2", "zero3", "fsdp")
GATHERING = ("zero3", "fsdp")  # shardings that all-gather weights every micro-step
SHARDED_OPTIMIZER = ("zero2", "zero3", "fsdp")


@dataclass(frozen=True)
class Layout:
    """Where the job runs: GPUs per node, nodes, how model state is split, the network between nodes."""

    gpus_per_node: int = 1
    nodes: int = 1
    sharding: str | None = None  # None on one GPU
    offload: bool = False
    network: str = "ethernet"

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise BadInput(f"GPUs per node and nodes must be >= 1 (got {self.gpus_per_node}, {self.nodes})")
        if self.sharding is not None and self.sharding not in SHARDINGS:
            raise BadInput(f"sharding {self.sharding!r} is not one of {', '.join(SHARDINGS)}")
        if self.network not in NETWORKS:
            raise BadInput(f"network {self.network!r} is not one of {', '.join(NETWORKS)}")
        if self.offload and self.sharding in (None, "ddp"):
            raise BadInput("offload needs --sharding fsdp, zero2 or zero3 (DDP keeps everything on the GPU)")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Comm:
    """Seconds of transfers: once per optimizer step (DDP/ZeRO-2) and per micro-step (gathers, offload)."""

    per_step_s: float = 0.0
    per_micro_s: float = 0.0


@lru_cache(maxsize=1)
def no_peer_to_peer() -> frozenset[str]:
    """Datacenter boards without GPU peer-to-peer in the instances that carry them (data/interconnect.yaml)."""
    try:
        return frozenset(yaml.safe_load(INTERCONNECT.read_text())["no_peer_to_peer"]["boards"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise BadInput(f"{INTERCONNECT}: not a valid link table ({err}); restore it from the package") from None


def intra_node_gbs(gpu: Any, table: dict) -> float:
    """Effective collective bandwidth per GPU inside one node, GB/s."""
    links, arch = table["links"], getattr(gpu, "arch", "")
    if getattr(gpu, "interconnect", "pcie") in ("nvlink", "sxm"):
        return float(links["nvlink"].get(arch, links["nvlink"]["default"]))
    gen = int(links["pcie_gen"].get(arch, links["pcie_gen"]["default"]))
    gbs = 16 * 2 ** (gen - 3) * float(links["pcie_efficiency"]["value"])
    if getattr(gpu, "tier", "") == "consumer" or getattr(gpu, "name", "") in no_peer_to_peer():
        gbs *= float(links["no_p2p_factor"]["value"])
    return gbs


def _ring(nbytes: float, n: int, gbs: float, factor: float) -> float:
    return 0.0 if n <= 1 else factor * (n - 1) / n * nbytes / (gbs * 1e9)


def _collective(nbytes: float, layout: Layout, gpu: Any, table: dict, factor: float) -> float:
    """One ring over every rank at its slowest hop: the GPUs' link in one node, the node's NIC across nodes
    (NCCL's all-gather and reduce-scatter are rings; the hops run concurrently, so the slowest one sets the time)."""
    gbs = intra_node_gbs(gpu, table)
    if layout.nodes > 1:
        gbs = min(gbs, float(table["links"]["inter_node_gbs"][layout.network]["value"]))
    return _ring(nbytes, layout.gpus, gbs, factor)


def communication(layout: Layout, gpu: Any, stored_bytes: float, grad_bytes: float, table: dict) -> Comm:
    """Transfers for one GPU's share: `stored_bytes` are the weights as stored (bf16, or NF4 for QLoRA)
    plus trainable ones, `grad_bytes` the trainable gradients."""
    if layout.gpus <= 1 and not layout.offload:
        return Comm()
    host = float(table["links"]["host_pcie_gbs"]["value"]) * 1e9
    n = layout.gpus
    if layout.sharding in GATHERING:
        micro = 2 * _collective(stored_bytes, layout, gpu, table, 1.0) + _collective(grad_bytes, layout, gpu, table, 1.0)
        if layout.offload:  # the shard goes up for forward and backward, its gradients come down
            micro += (2 * stored_bytes + grad_bytes) / n / host
        return Comm(per_micro_s=micro)
    step = _collective(grad_bytes, layout, gpu, table, 2.0)  # all-reduce, or ZeRO-2's scatter + gather
    if layout.offload:
        step += 2 * grad_bytes / n / host
    return Comm(per_step_s=step)


def exposed_seconds(comm: Comm, layout: Layout, accum: int, micro_compute_s: float, layers: int,
                    table: dict) -> float:
    """Communication seconds per optimizer step that compute does not hide. DDP overlaps its all-reduce
    with the last micro-step's backward (about 2/3 of its compute); gathering strategies prefetch the
    next unit during compute, leaving one unit's share exposed."""
    out = 0.0
    if comm.per_step_s:
        ovl = float(table["overlap"]["ddp"]["value"])
        out += comm.per_step_s - ovl * min(comm.per_step_s, micro_compute_s * 2 / 3)
    if comm.per_micro_s:
        ovl = float(table["overlap"]["sharded"]["value"])
        c = comm.per_micro_s
        out += accum * (max(0.0, c - ovl * micro_compute_s) + c / max(layers, 1))
    return out
