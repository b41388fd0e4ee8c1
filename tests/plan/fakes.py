"""Small hand-made catalogs and a fake memory fit, so planner tests run without the real estimator."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

from cheaptune.estimate.time.throughput import ModelShape
from cheaptune.plan.candidates import FitOutcome, planned_micro

GIB = 1024**3
SHAPE_7B = ModelShape(params=6_738_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False)
NEEDS = {"full": 70 * GIB, "lora": 17 * GIB, "qlora": 8 * GIB, "dora": 18 * GIB}
TRAINABLE = {"full": 6_738_000_000, "lora": 40_000_000, "qlora": 40_000_000, "dora": 41_000_000}
PER_SEQ = 2 * GIB


def gpu(name, mem_gib, arch="ampere", tier="datacenter", tflops=312.0, bw=1555, bf16=True, bnb_4bit=True,
        interconnect=None):
    link = interconnect or ("pcie" if tier == "consumer" else "sxm")
    return SimpleNamespace(name=name, memory_gib=mem_gib, memory_bytes=int(mem_gib * GIB), arch=arch, tier=tier,
                           bf16=bf16, bf16_tflops=tflops if bf16 else None, fp16_tflops=tflops, fp32_tflops=tflops / 16,
                           mem_bw_gbs=bw, bnb_4bit=bnb_4bit, interconnect=link)


GPUS = [
    gpu("RTX4090", 24, arch="ada", tier="consumer", tflops=165.2, bw=1008),
    gpu("A100-80GB", 80, tflops=312.0, bw=2039),
    gpu("H100", 80, arch="hopper", tflops=989.4, bw=3350),
    gpu("T4", 15, arch="turing", tflops=65.0, bw=320, bf16=False),
]


def offer(provider, gpu_name, price, spot=False, kind=None, count=1, unit=1, minimum=0, egress=0.0,
          storage=0.10, rate=None, region="r1"):
    return SimpleNamespace(provider=provider, kind=kind or ("spot" if spot else "on-demand"), gpu=gpu_name,
                           gpu_count=count, instance_type=f"{gpu_name}-x{count}", region=region,
                           price_per_hour=price, billing_unit_s=unit, min_billed_s=minimum, storage_gb_month=storage,
                           egress_per_gb=egress, interruption_per_hour=rate, notice_s=30, spot=spot,
                           source="test", date=date.today().isoformat())  # fresh: price age is tested apart


OFFERS = [
    offer("cheapcloud", "RTX4090", 0.40, kind="community"),
    offer("cheapcloud", "RTX4090", 0.25, spot=True, rate=0.1),
    offer("bigcloud", "A100-80GB", 3.40, unit=1, minimum=60, egress=0.09),
    offer("bigcloud", "A100-80GB", 1.10, spot=True, rate=0.1, egress=0.09),
    offer("gpucloud", "H100", 2.50, unit=60),
    offer("bigcloud", "H100", 55.04, count=8),
    offer("oldcloud", "T4", 0.20, unit=3600, minimum=3600),
]


def fake_fit(headroom=0.10, needs=None, effective_batch=16):
    """Peak = need at one sequence + PER_SEQ per extra sequence; the outcome is at the planned micro-batch."""
    needs = needs or NEEDS

    def fit(method: str, mem: int, precision: str = "bf16-true") -> FitOutcome:
        usable = mem * (1 - headroom)
        need = needs[method]
        if need > usable:
            return FitOutcome(False, peak_bytes=need)
        micro, _ = planned_micro(int((usable - need) // PER_SEQ) + 1, effective_batch)
        return FitOutcome(True, micro, False, need + (micro - 1) * PER_SEQ, TRAINABLE[method], SHAPE_7B.params, "fake")

    return fit


ZERO3_STATE = 1.5  # DeepSpeed keeps fp32 master weights: more state per GPU than FSDP
OFFLOADED_STATE = 0.25  # what stays on the GPU with CPU offload (gathered units, buffers)


def fake_multi_fit(headroom=0.10, needs=None, effective_batch=16, calls=None):
    """Per-GPU peak = the model state (whole for ddp, split N ways otherwise) + PER_SEQ per sequence."""
    needs = needs or NEEDS

    def fit(method: str, mem: int, gpus: int, sharding: str, offload: bool, precision: str = "bf16-true") -> FitOutcome:
        if calls is not None:
            calls.append((method, mem, gpus, sharding, offload))
        state = needs[method] - PER_SEQ
        if sharding != "ddp":
            state = state / gpus * (ZERO3_STATE if sharding == "zero3" else 1.0)
        if offload:
            state *= OFFLOADED_STATE
        usable = mem * (1 - headroom)
        if state + PER_SEQ > usable:
            return FitOutcome(False, peak_bytes=int(state + PER_SEQ))
        micro, _ = planned_micro(int((usable - state) // PER_SEQ), effective_batch, gpus)
        return FitOutcome(True, micro, False, int(state + micro * PER_SEQ), TRAINABLE[method], SHAPE_7B.params,
                          "fake")

    return fit
