"""Stages 2-3: for each fitting (method, GPU) and each offer, time and money.

Time = start-up + tokens x epochs / tokens per s (+ expected spot losses, checkpoints included) + the end (final
save, upload), each term with its source (time_terms); money = compute billed in the offer's unit and minimum
+ storage + egress + expected spot loss. Pure over its arguments.
Tokens/s come from the step-time model (estimate/time/throughput.py: compute, communication over the real
link, optimizer, dequant, fixed cost) for the GPUs, sharding and micro-batch planned; every instance is
billed for the whole run, and on several nodes the ones that come up first are billed while they wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from cheaptune.catalog.interruption import priced_rate
from cheaptune.estimate.cost import cost as money
from cheaptune.estimate.cost.spot import spot_overhead
from cheaptune.estimate.policy import compute_dtype
from cheaptune.estimate.time.ceilings import capped
from cheaptune.estimate.time.intervals import time_band
from cheaptune.estimate.time.scaling import Layout, serial_link
from cheaptune.estimate.time.speedups import describe, describe_unmeasured, for_gpu
from cheaptune.estimate.time.throughput import Job, ModelShape, adapted_per_layer, reference_passes, step_time
from cheaptune.plan.candidates import GpuFit, planned_micro, run_precision
from cheaptune.plan.price_age import aged_risk, price_facts
from cheaptune.plan.workload import INTER_NODE_NETWORK, Workload

SECONDS_PER_HOUR = money.SECONDS_PER_HOUR
CHECKPOINTS_KEPT = 2  # the trainer keeps the last two checkpoints (save_total_limit)
BF16_BYTES = 2
HIGH_RISK_PREEMPTIONS = 1.0

# The trainer's save interval is at least this: a job shorter than its Young/Daly interval still gets a
# timed checkpoint, and the plan file never asks for save_minutes of 0.
MIN_CHECKPOINT_MINUTES = 1.0


@dataclass
class Option:
    """One priced way to run the job; the fields the table and the JSON show."""

    method: str
    gpu: str
    gpu_count: int
    provider: str
    region: str
    spot: bool
    kind: str
    instance_type: str | None
    price_per_hour: float
    billing_unit_s: int
    min_billed_s: int
    peak_vram_bytes: int
    gpu_memory_bytes: int
    micro_batch: int
    grad_accum: int
    grad_ckpt: bool
    tokens_per_s: float
    hours: float
    cost: dict[str, float]
    pessimistic_total: float
    risk: str
    checkpoint_minutes: float | None
    precision: str
    num_nodes: int = 1
    sharding: str | None = None  # None on one GPU; ddp | zero3 | fsdp (| fsdp+offload) on several
    network: str | None = None  # between the nodes, what the time was priced over (Workload.network); None on one
    # the price's provenance (plan/price_age.py): the date its source gives, that source, its age, its basis
    price_as_of: str = "undated"
    price_source: str = ""
    price_age_days: int | None = None
    price_basis: str = "quoted"
    details: dict[str, Any] = field(default_factory=dict)
    offer: Any = field(default=None, repr=False, compare=False)  # the catalog Offer, not shown
    spec: Any = field(default=None, repr=False, compare=False)  # the GpuSpec, not shown
    fit: Any = field(default=None, repr=False, compare=False)  # the GpuFit it was priced from, not shown

    @property
    def total(self) -> float:
        return self.cost["total"]

    @property
    def total_gpus(self) -> int:
        return self.gpu_count * self.num_nodes

    def hardware(self) -> str:
        """'H100 x8', 'H100 x8 x2 nodes (ethernet)', with the sharding when there is more than one GPU."""
        nodes = f" x{self.num_nodes} nodes ({self.network})" if self.num_nodes > 1 else ""
        shard = f" {self.sharding}" if self.sharding else ""
        return f"{self.gpu} x{self.gpu_count}{nodes}{shard}"

    def label(self) -> str:
        mode = "spot" if self.spot else self.kind
        return f"{self.method} on {self.hardware()} at {self.provider}/{self.region} ({mode})"


MBPS_TO_BYTES = 1e6 / 8  # a listing's Mbit/s to bytes/s


def download_rate(offer: Any, consts: dict[str, float]) -> tuple[float, str]:
    """Bytes/s the weights download at: the provider's measured bandwidth where the listing states it, else the
    start-up file's rate; and which it is."""
    mbps = (getattr(offer, "listing", None) or {}).get("inet_down_mbps")
    if mbps:
        return float(mbps) * MBPS_TO_BYTES, f"the listing's measured {float(mbps):.0f} Mbit/s down"
    return consts["download_bytes_per_s"], "download_bytes_per_s"


def startup_seconds(shape: ModelShape, workload: Workload, consts: dict[str, float],
                    offer: Any = None) -> dict[str, float]:
    """Seconds before the first step: provision, install, download (at the provider's bandwidth where known) and
    load the bf16 weights, tokenize."""
    weight_bytes = shape.params * BF16_BYTES
    return {
        "provision": consts["provision_s"],
        "install": consts["install_s"],
        "download": weight_bytes / download_rate(offer, consts)[0],
        "load": weight_bytes / consts["disk_read_bytes_per_s"],
        "tokenize": workload.tokens / consts["dataset_tokenize_tokens_per_s"],
    }


def end_seconds(arts: Any, method: str, consts: dict[str, float]) -> dict[str, float]:
    """Seconds after the last step: the final save and the upload of what ships (the adapter, or the whole
    model for a full fine-tune). A merge runs only when asked (`cheaptune export --to merged`), not in the plan."""
    return {"final_save": arts.checkpoint_bytes / consts["disk_write_bytes_per_s"],
            "upload": arts.shipped_bytes(method) / consts["upload_bytes_per_s"]}


def time_terms(start: dict[str, float], train_s: float, spot: Any, end: dict[str, float], offer: Any,
               consts: dict[str, float]) -> dict[str, Any]:
    """Every term of the wall time with its seconds and source (what the plan shows and the JSON carries)."""
    src, (_, rate) = money.sources(), download_rate(offer, consts)
    cite = {"provision": src["provision_s"], "install": src["install_s"], "download": src.get(rate, rate),
            "load": src["disk_read_bytes_per_s"],
            "tokenize": src["dataset_tokenize_tokens_per_s"], "final_save": src["disk_write_bytes_per_s"],
            "upload": src["upload_bytes_per_s"]}
    saves = int(train_s // spot.interval_s) if spot and spot.interval_s > 0 else 0
    return {"startup": {k: {"s": round(v, 1), "source": cite[k]} for k, v in start.items()},
            "training": {"s": round(train_s, 1), "source": "the step-time model (estimate/time/throughput.py)"},
            "checkpoints": {"saves": saves, "s": round(saves * spot.checkpoint_s, 1) if spot else 0.0,
                            "source": ("Young/Daly interval on spot, counted in the spot overhead; "
                                       + src["disk_write_bytes_per_s"]) if spot else "none timed on this offer"},
            "end": {k: {"s": round(v, 1), "source": cite[k]} for k, v in end.items()}}


def describe_terms(o: Option) -> str:
    """One line: the recommendation's hours term by term (sources in the JSON's details.time_terms)."""
    t = o.details["time_terms"]
    mins = lambda d: ", ".join(f"{k} {v['s'] / 60:.1f} min" for k, v in d.items())  # noqa: E731
    ck = t["checkpoints"]
    saves = f"{ck['saves']} checkpoint saves ({ck['s'] / 60:.1f} min, in the spot overhead)" if ck["saves"] else \
        "no timed checkpoint saves"
    return (f"hours, term by term: start-up ({mins(t['startup'])}), training {t['training']['s'] / 3600:.2f} h, "
            f"{saves}, the end ({mins(t['end'])}); each term's source: --json details.time_terms")


def other_stack_line(best: Option, workload: Workload, shape: ModelShape, consts: dict[str, float],
                     stack: str = "unsloth") -> str:
    """The same job (same GPU, offer, memory plan) timed with another trainer stack's fitted constants, as an
    alternative line; its memory is not re-estimated (the estimate is of cheaptune's trainer)."""
    if best.fit is None or best.offer is None or best.total_gpus > 1:
        return ""  # Unsloth's open-source release trains on one GPU
    alt = price_option(best.fit, best.offer, workload, shape, consts, False, stack)
    return (f"with {stack} instead of cheaptune's HF stack, the same job would take {alt.hours:.2f} h and "
            f"${alt.total:.2f} (p90 ${alt.details['interval']['total_usd'][2]:.2f}) at {alt.tokens_per_s:,.0f} tokens/s "
            f"(steptime.yaml stacks.{stack}, fitted on its own public rows; memory not re-estimated)")


def repriced(o: Option, workload: Workload, shape: ModelShape, consts: dict[str, float]) -> Option:
    """The same option (fit, offer, and the speed options it was priced with) for another workload: the budget
    search and the data audit re-price the recommendation, and with price_option's default they turned the speed
    options on where the plan had them off (--no-speedups, or a config that sets none)."""
    return price_option(o.fit, o.offer, workload, shape, consts, tuple(o.details["speedups"]["options"]))


def price_option(gf: GpuFit, offer: Any, workload: Workload, shape: ModelShape, consts: dict[str, float],
                 speedups: bool | tuple[str, ...] = True, stack: str = "cheaptune") -> Option:
    """Time, cost and risk of one (method, GPUs, offer); `offer` is one instance of `gf.nodes`. With `speedups`
    the speed options that pay on the board (estimate.speedups.for_gpu) are on and their factor applied; `stack`
    is whose trainer runs it (steptime.yaml stacks; cheaptune's own by default)."""
    fit, gpu, nodes = gf.fit, gf.gpu, gf.nodes
    micro, accum = planned_micro(fit.micro_batch, workload.effective_batch, gf.gpus)
    precision = compute_dtype(run_precision(gf.method, gpu), getattr(gpu, "bf16", False))
    job = Job(shape, gf.method, workload.seq_len, micro, fit.grad_ckpt, fit.trainable_params, accum, precision,
              objective=workload.objective,
              reference=reference_passes(workload.objective, fit.precompute_ref, workload.epochs), stack=stack,
              adapted_modules=adapted_per_layer(workload.lora_targets))
    sharding = (gf.sharding or "ddp") if gf.gpus > 1 else None
    network = workload.inter_node_network if nodes > 1 else None
    layout = Layout(gf.gpus_per_node, nodes, sharding, gf.offload, network or INTER_NODE_NETWORK)
    st = step_time(job, gpu, layout)
    fast = for_gpu(gpu, gf.method, speedups)
    # no faster than the best share of the matmul rate public runs reached on its board class (estimate.ceilings)
    tokens_per_s, ceiling_line = capped(st.tokens_per_s * fast.factor, st.mfu * fast.factor, gpu, gf.method)
    start = startup_seconds(shape, workload, consts, offer)
    start_s = sum(start.values())
    # nodes that come up first wait (and are billed) up to one provisioning time for the last one
    wait_s = consts["provision_s"] if nodes > 1 else 0.0
    train_s = workload.train_tokens / tokens_per_s
    arts = money.artifact_sizes(gf.method, fit.total_params or shape.params, fit.trainable_params or shape.params,
                                run_precision(gf.method, gpu))
    price = float(offer.price_per_hour)
    spot_est = None
    rate = priced_rate(offer)  # a marketplace host can fail, too
    if rate is not None:
        ckpt_s = arts.checkpoint_bytes / consts["disk_write_bytes_per_s"]
        restart_s = start_s - start["tokenize"] + arts.checkpoint_bytes / consts["disk_read_bytes_per_s"]
        # any node's loss stops the job; the pessimistic bound is at the top of the rate's range
        # the first start-up is exposed too, less tokenizing (left out of a restart as well)
        spot_est = spot_overhead(train_s, rate.expected * nodes, ckpt_s, restart_s, rate.high * nodes,
                                 start_s - start["tokenize"])
    extra_s = spot_est.expected_extra_s if spot_est else 0.0
    end = end_seconds(arts, gf.method, consts)
    end_s = sum(end.values())
    wall_s = start_s + train_s + extra_s + end_s
    hours = wall_s / SECONDS_PER_HOUR
    kept_gb = (workload.dataset_bytes + CHECKPOINTS_KEPT * arts.checkpoint_bytes) / money.BYTES_PER_GB
    last = money.compute_cost(start_s + train_s + end_s, price, offer.billing_unit_s, offer.min_billed_s)
    early = money.compute_cost(start_s + train_s + end_s + wait_s, price, offer.billing_unit_s, offer.min_billed_s)
    parts = {
        "compute": last + (nodes - 1) * early,
        "storage": money.storage_cost(kept_gb, hours, float(offer.storage_gb_month or 0.0)),
        "egress": money.egress_cost(arts.shipped_bytes(gf.method) / money.BYTES_PER_GB, offer.egress_per_gb),
        "spot_overhead": extra_s / SECONDS_PER_HOUR * price * nodes,
    }
    cost = money.cost_summary(parts)

    def at(k: float) -> tuple[float, float]:
        """(hours, total $) with the training time x k: compute re-billed, storage and spot loss scaled."""
        t = train_s * k
        h = (start_s + t + extra_s * k + end_s) / SECONDS_PER_HOUR
        c = (money.compute_cost(start_s + t + end_s, price, offer.billing_unit_s, offer.min_billed_s) + (nodes - 1)
             * money.compute_cost(start_s + t + end_s + wait_s, price, offer.billing_unit_s, offer.min_billed_s))
        return h, c + parts["storage"] * h / hours + parts["egress"] + parts["spot_overhead"] * k

    # p10, p50, p90 of measured / predicted time (estimate.intervals), on rows of the same kind of link
    band = time_band(gpu, gf.method, gf.gpus, serial_link=serial_link(layout, gpu))
    p10, p50, p90 = (at(k) for k in band[:3])
    pessimistic = cost["total"]
    if spot_est:
        pessimistic += (spot_est.pessimistic_extra_s - extra_s) / SECONDS_PER_HOUR * price * nodes
    risk = "low"
    if spot_est or (getattr(offer, "listing", None) or {}).get("verified") is False:
        risk = "high" if spot_est and spot_est.expected_preemptions >= HIGH_RISK_PREEMPTIONS else "medium"
    if sharding and gf.offload:
        sharding += "+offload"
    facts = price_facts(offer, date.today())
    risk = aged_risk(risk, facts)
    return Option(
        method=gf.method,
        gpu=gpu.name,
        gpu_count=gf.gpus_per_node,
        provider=offer.provider,
        region=offer.region,
        spot=bool(offer.spot),
        kind=offer.kind,
        instance_type=offer.instance_type,
        price_per_hour=price,
        billing_unit_s=int(offer.billing_unit_s),
        min_billed_s=int(offer.min_billed_s),
        peak_vram_bytes=fit.peak_bytes,
        gpu_memory_bytes=gpu.memory_bytes,
        micro_batch=micro,
        grad_accum=accum,
        grad_ckpt=fit.grad_ckpt,
        tokens_per_s=round(tokens_per_s, 1),
        hours=round(hours, 4),
        cost=cost,
        pessimistic_total=round(pessimistic, 4),
        risk=risk,
        checkpoint_minutes=max(MIN_CHECKPOINT_MINUTES, round(spot_est.interval_s / 60, 1)) if spot_est else None,
        precision=precision,
        num_nodes=nodes,
        sharding=sharding,
        network=network,
        details={
            "time": st.to_dict(),
            "interval": {"hours": [round(p10[0], 4), round(p50[0], 4), round(p90[0], 4)],
                         "total_usd": [round(p10[1], 4), round(p50[1], 4), round(p90[1], 4)],
                         "time_factors": [round(k, 3) for k in band[:3]], "basis": band[3]},
            "mfu_ceiling": ceiling_line or None,
            "speedups": {"options": list(fast.options), "factor": round(fast.factor, 4), "line": describe(fast),
                         "priced": list(fast.priced), "unmeasured": list(fast.unmeasured),
                         "unmeasured_line": describe_unmeasured(fast, gf.method, gpu)},
            "scale_out": None if gf.gpus == 1 else {
                "communication_s_per_step": round(st.parts["communication"], 4), "node_wait_s": wait_s,
                "network": network},
            "startup_s": {k: round(v, 1) for k, v in start.items()},
            "end_s": {k: round(v, 1) for k, v in end.items()},
            "time_terms": time_terms(start, train_s, spot_est, end, offer, consts),
            "train_hours": round(train_s / SECONDS_PER_HOUR, 4),
            "spot": {**spot_est.to_dict(), "rate": rate.to_dict()} if spot_est and rate else None,
            "listing": getattr(offer, "listing", None),
            "shipped_bytes": arts.shipped_bytes(gf.method),
            "checkpoint_bytes": arts.checkpoint_bytes,
            "trainable_params": fit.trainable_params,
            "memory_basis": fit.basis,
            "reference": fit.note or None,
            "billed_overhead_usd": round(parts["compute"] - train_s / SECONDS_PER_HOUR * price * nodes, 4),
            "egress_merged_usd": round(money.egress_cost(arts.merged_bytes / money.BYTES_PER_GB, offer.egress_per_gb), 4),
            "egress_adapter_usd": round(money.egress_cost(arts.adapter_bytes / money.BYTES_PER_GB, offer.egress_per_gb), 4),
        },
        offer=offer,
        spec=gpu,
        fit=gf,
        **facts,
    )
