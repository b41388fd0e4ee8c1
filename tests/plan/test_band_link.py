"""A plan's p10-p90 band comes from held-out rows on the same kind of link as the planned layout."""

from __future__ import annotations

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.estimate.cost.cost import constants
from cheaptune.estimate.time.intervals import time_band
from cheaptune.estimate.time.scaling import Layout, serial_link
from cheaptune.estimate.time.throughput import ModelShape
from cheaptune.plan.candidates import FitOutcome, GpuFit
from cheaptune.plan.pricing import INTER_NODE_NETWORK, price_option
from cheaptune.plan.workload import Workload
from tests.plan.fakes import offer

SHAPE = ModelShape(params=6_738_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False)


def test_a_two_node_ethernet_plan_takes_the_serial_link_band():
    gpu = resolve_gpu("H100")
    layout = Layout(8, 2, "fsdp", False, INTER_NODE_NETWORK)
    assert serial_link(layout, gpu) and not serial_link(Layout(16), gpu)  # the case differs from one node's
    fit = FitOutcome(True, 4, False, gpu.memory_bytes // 2, SHAPE.params, SHAPE.params, "fake")
    gf = GpuFit("full", gpu, fit, gpus_per_node=8, nodes=2, sharding="fsdp")
    w = Workload(tokens=50_000_000, epochs=1, seq_len=2048, effective_batch=128)
    o = price_option(gf, offer("x", gpu.name, 1.0), w, SHAPE, constants())
    want = time_band(gpu, "full", 16, serial_link=True)
    assert o.details["interval"]["basis"] == want[3]
    assert o.details["interval"]["time_factors"] == [round(k, 3) for k in want[:3]]
