"""Communication of data-parallel training: bytes each sharding strategy sends, over which link.

Why bytes and not an efficiency table: what DDP sends is the trainable gradients (a LoRA adapter's
are a few MB, a full fine-tune's are the whole model), FSDP/ZeRO-3 gather the stored weights every
micro-step (0.56 B per weight for a 4-bit base, 2 B for bf16) and scatter the gradients, and CPU
offload moves the shard over PCIe to the host. Time = bytes / the link's bandwidth (NVLink, PCIe without
peer-to-peer on GeForce and on the boards data/interconnect.yaml names, the NCCL bus bandwidth measured on the
instances of the boards it lists, the network between nodes: named, a rate, or an instance type's stated rate),
then hidden behind compute as far as the strategy overlaps (`exposed_seconds`). Ring collectives over all n ranks: all-reduce moves 2(n-1)/n of the data,
all-gather and reduce-scatter (n-1)/n, at the bus bandwidth of the ring's slowest hop (NVIDIA/nccl-tests@03a204a
doc/PERFORMANCE.md: t = S(n-1)/(nB), B "the hardware bottleneck: NVLink, PCI, QPI, or network"). Across nodes
that hop is the node's NIC: every ring crossing the node boundary shares it, so it carries (n-1)/n of the data
for all n ranks, not (nodes-1)/nodes as a two-level (intra, then inter) sum would; measured busbw sits at the
node's NIC total (NVIDIA/nccl-tests#119: 3 nodes x 8 A100, 4x 200 Gbit/s each, 85-96 of 100 GB/s). NCCL may
all-reduce by tree across nodes, above the NIC rate on 2 nodes (NVIDIA/nccl#837), so DDP's ring time errs slow.
Gradient accumulation: FSDP re-gathers the weights every micro-step, but the HF Trainer and litgpt skip the
gradient reduce-scatter on all micro-steps but the last (transformers 5.24.0 trainer.py L1904-1915: no_sync unless
DeepSpeed or the last batch; litgpt finetune/full.py: fabric.no_backward_sync(model, enabled=is_accumulating)),
while DeepSpeed ZeRO-3 reduces every micro-step. The HF Trainer of 2023 did the same (transformers 4.27.1 and 4.28.0
pip wheels, trainer.py: model.no_sync() on accumulating micro-steps unless DeepSpeed, SageMaker or Neuron).
Prefetch: the gathers hide behind compute where the next unit's all-gather is issued early. transformers 4.27.1 and
4.28.0 passed FSDP backward_prefetch=BACKWARD_PRE, forward_prefetch and limit_all_gathers False by default (trainer.py
L440-450 / L461-471), and transformers 5.24.0 runs FSDP2 by default (training_args.py L2826, fsdp_config version 2),
which prefetches the next module in backward itself; only the FSDP1 paths default to no backward prefetch
(transformers 5.24.0 training_args.py L2875 "NO_PREFETCH", accelerate 1.15.0 utils/dataclasses.py L1679-1682, L1892-1895), where
torch's BackwardPrefetch docstring says None "has no overlap" (torch 2.13 distributed/fsdp/api.py L91-94): not timed,
as neither the CLI nor any bench row runs it. FSDP's per-unit work each micro-step beyond the bytes (hooks, stream
waits, collective launches) is a fitted cost per layer (gathers_per_unit; steptime.yaml fixed_per_layer_s.sharded).
ZeRO-3 under gradient checkpointing gathers the weights three times a micro-step, not two (gathers_per_micro): its
hooks run on every submodule's forward, the recompute's too, and release the weights after it, so the backward
fetches them again. Constants: data/steptime.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

INTERCONNECT = Path(__file__).resolve().parent.parent / "data" / "interconnect.yaml"

NETWORKS = ("ethernet", "infiniband")  # named networks (steptime.yaml links.inter_node_gbs)
RATE = re.compile(r"(\d+(?:\.\d+)?)gbit")  # a stated node rate: "100gbit"
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
        network_gbit(self.network)  # one line for a network that is not a name, a rate or a known instance
        if self.offload and self.sharding in (None, "ddp"):
            raise BadInput("offload needs --sharding fsdp, zero2 or zero3 (DDP keeps everything on the GPU)")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Comm:
    """Seconds of transfers: once per optimizer step (DDP/ZeRO-2), per micro-step (gathers, offload, ZeRO-3's
    gradient reduce-scatter) and on the last micro-step only (FSDP's reduce-scatter under no_sync), and whether the
    link is one compute does not hide them behind (`serial_link`)."""

    per_step_s: float = 0.0
    per_micro_s: float = 0.0
    last_micro_s: float = 0.0
    serial_link: bool = False


@lru_cache(maxsize=1)
def _interconnect() -> dict:
    try:
        doc = yaml.safe_load(INTERCONNECT.read_text())
        _ = doc["no_peer_to_peer"]["boards"], float(doc["serial_link_overlap"]["value"])
        _ = {k: float(v["value"]) for k, v in doc["measured_busbw_gbs"].items()}
        _ = float(doc["network_rate"]["efficiency"]["value"]), dict(doc["instance_network_gbit"]["values"])
        return doc
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise BadInput(f"{INTERCONNECT}: not a valid link table ({err}); restore it from the package") from None


def no_peer_to_peer() -> frozenset[str]:
    """Datacenter boards without GPU peer-to-peer in the instances that carry them (data/interconnect.yaml)."""
    return frozenset(_interconnect()["no_peer_to_peer"]["boards"])


def peer_to_peer(gpu: Any) -> bool:
    """Whether GPUs of this board in one node reach each other directly (NVLink, or PCIe with P2P)."""
    if getattr(gpu, "interconnect", "pcie") in ("nvlink", "sxm"):
        return True
    return not (getattr(gpu, "tier", "") == "consumer" or getattr(gpu, "name", "") in no_peer_to_peer())


def network_gbit(network: str) -> float | None:
    """The stated rate of `network` in Gbit/s per node: None for a named network (ethernet, infiniband), the N of
    'Ngbit', or the rate data/interconnect.yaml gives an instance type (g5.12xlarge: 40). Anything else is bad
    input, said in one line."""
    if network in NETWORKS:
        return None
    doc, m = _interconnect(), RATE.fullmatch(network)
    instances = doc["instance_network_gbit"]["values"]
    if m is None and network not in instances:
        raise BadInput(f"network {network!r} is not {', '.join(NETWORKS)}, a rate per node like 100gbit, or an "
                       f"instance type with a stated rate ({', '.join(instances)})")
    rate = float(m.group(1)) if m else float(instances[network])
    lo, hi = doc["network_rate"]["lowest_gbit"], doc["network_rate"]["highest_gbit"]
    if not lo <= rate <= hi:
        raise BadInput(f"network {network!r}: a rate from {lo} to {hi} Gbit/s per node, like 100gbit")
    return rate


def inter_node_gbs(network: str, table: dict) -> float:
    """GB/s a node's NIC gives a ring crossing it: a named network's figure (steptime.yaml), else the stated rate
    at interconnect.yaml's network_rate efficiency."""
    rate = network_gbit(network)
    if rate is None:
        return float(table["links"]["inter_node_gbs"][network]["value"])
    return rate / 8 * float(_interconnect()["network_rate"]["efficiency"]["value"])


def serial_link(layout: Layout, gpu: Any) -> bool:
    """Whether FSDP/ZeRO-3's transfers run on a link that compute does not hide them behind: ethernet between
    nodes, named or stated as a rate or instance type (NCCL's IP-socket transport, "NCCL uses network (IB or IP
    sockets)", NCCL 2.3.7 docs env.txt) or GPUs
    of one node on the boards data/interconnect.yaml lists without usable peer-to-peer (the A10G: P2P writes
    measured at 49,207 us). GeForce boards' host-memory path (SHM) keeps the prefetch overlap: their held-out
    FSDP rows read right with it (interconnect.yaml serial_link_overlap)."""
    return (layout.nodes > 1 and layout.network != "infiniband") or (
        layout.gpus_per_node > 1 and getattr(gpu, "name", "") in no_peer_to_peer())


def intra_node_gbs(gpu: Any, table: dict) -> float:
    """Effective collective bandwidth per GPU inside one node, GB/s: NCCL's busbw measured on the board's
    instances where data/interconnect.yaml has it, else the link's rate by the PCIe or NVLink figures."""
    measured = _interconnect()["measured_busbw_gbs"].get(getattr(gpu, "name", ""))
    if measured is not None:
        return float(measured["value"])
    links, arch = table["links"], getattr(gpu, "arch", "")
    if getattr(gpu, "interconnect", "pcie") in ("nvlink", "sxm"):
        return float(links["nvlink"].get(arch, links["nvlink"]["default"]))
    gen = int(links["pcie_gen"].get(arch, links["pcie_gen"]["default"]))
    gbs = 16 * 2 ** (gen - 3) * float(links["pcie_efficiency"]["value"])
    return gbs if peer_to_peer(gpu) else gbs * float(links["no_p2p_factor"]["value"])


def gathers_per_unit(layout: Layout) -> bool:
    """Whether each GPU runs FSDP's per-unit work every micro-step: an all-gather before each wrapped layer's forward
    and backward across more than one GPU (steptime.yaml fixed_per_layer_s.sharded times its cost per layer)."""
    return layout.sharding == "fsdp" and layout.gpus > 1


def gathers_per_micro(layout: Layout, grad_ckpt: bool) -> int:
    """All-gathers of the stored weights each micro-step: forward and backward, plus the recompute's under ZeRO-3
    with gradient checkpointing. DeepSpeed's forward pre-hook fetches every parameter not available on the
    recompute forward too and its post-hook partitions them again at that submodule's end (huggingface/transformers
    #47254, 2026-07-10, tracing DeepSpeed v0.19.2 runtime/zero/partition_parameters.py L315; the same hook firing in
    the recompute: deepspeedai/DeepSpeed#4784, 2023-12-07, parameter_offload.py pre_sub_module_forward_function),
    so the backward fetches them once more. FSDP keeps a unit gathered through a recompute nested inside it (torch
    2.13 distributed/fsdp/_runtime_utils.py L373-380, L468-471; _fully_shard/_fsdp_state.py L293-303): two, as
    cheaptune's fsdp_activation_checkpointing runs. Not modelled: the HF Trainer's own gradient checkpointing wraps
    each FSDP unit from outside, which in its reentrant form (transformers before 5.x) re-gathers too ("a redundant
    all-gather in the backward pass", transformers 5.24.0 training_args.py L692-695); no row states its versions."""
    return 3 if layout.sharding == "zero3" and grad_ckpt else 2


def _ring(nbytes: float, n: int, gbs: float, factor: float) -> float:
    return 0.0 if n <= 1 else factor * (n - 1) / n * nbytes / (gbs * 1e9)


def _collective(nbytes: float, layout: Layout, gpu: Any, table: dict, factor: float) -> float:
    """One ring over every rank at its slowest hop: the GPUs' link in one node, the node's NIC across nodes
    (NCCL's all-gather and reduce-scatter are rings; the hops run concurrently, so the slowest one sets the time);
    with one GPU per node every hop is the NIC."""
    gbs = intra_node_gbs(gpu, table) if layout.gpus_per_node > 1 else float("inf")
    if layout.nodes > 1:
        gbs = min(gbs, inter_node_gbs(layout.network, table))
    return _ring(nbytes, layout.gpus, gbs, factor)


def communication(layout: Layout, gpu: Any, stored_bytes: float, grad_bytes: float, table: dict,
                  gathers: int = 2) -> Comm:
    """Transfers for one GPU's share: `stored_bytes` are the weights as stored (bf16, or NF4 for QLoRA)
    plus trainable ones, `grad_bytes` the trainable gradients; `gathers` all-gathers of them per micro-step
    (gathers_per_micro)."""
    if layout.gpus <= 1 and not layout.offload:
        return Comm()
    host = float(table["links"]["host_pcie_gbs"]["value"]) * 1e9
    n, serial = layout.gpus, serial_link(layout, gpu)
    if layout.sharding in GATHERING:
        micro = gathers * _collective(stored_bytes, layout, gpu, table, 1.0)
        scatter = _collective(grad_bytes, layout, gpu, table, 1.0)
        if layout.offload:  # the shard goes up for each gather, its gradients come down
            micro += (gathers * stored_bytes + grad_bytes) / n / host
        if layout.sharding == "fsdp":  # no_sync on every micro-step but the last (module docstring)
            return Comm(per_micro_s=micro, last_micro_s=scatter, serial_link=serial)
        return Comm(per_micro_s=micro + scatter, serial_link=serial)
    step = _collective(grad_bytes, layout, gpu, table, 2.0)  # all-reduce, or ZeRO-2's scatter + gather
    if layout.offload:
        step += 2 * grad_bytes / n / host
    return Comm(per_step_s=step, serial_link=serial)


def exposed_seconds(comm: Comm, layout: Layout, accum: int, micro_compute_s: float, layers: int,
                    table: dict) -> float:
    """Communication seconds per optimizer step that compute does not hide. DDP overlaps its all-reduce
    with the last micro-step's backward (about 2/3 of its compute); gathering strategies prefetch the
    next unit during compute, leaving one unit's share exposed, as far as the link lets them
    (steptime.yaml overlap.sharded, or interconnect.yaml serial_link_overlap on a serial_link, which a `table`
    holding its own `serial_link_overlap` overrides: the job bench's fit without the held-out source); FSDP's
    reduce-scatter adds to the last micro-step's transfers only."""
    out = 0.0
    if comm.per_step_s:
        ovl = float(table["overlap"]["ddp"]["value"])
        out += comm.per_step_s - ovl * min(comm.per_step_s, micro_compute_s * 2 / 3)
    if comm.per_micro_s or comm.last_micro_s:
        entry = (table.get("serial_link_overlap") or _interconnect()["serial_link_overlap"] if comm.serial_link
                 else table["overlap"]["sharded"])
        ovl = float(entry["value"])

        def exposed(c: float) -> float:
            return max(0.0, c - ovl * micro_compute_s) + c / max(layers, 1)

        out += (accum - 1) * exposed(comm.per_micro_s) + exposed(comm.per_micro_s + comm.last_micro_s)
    return out
