"""Scaling efficiency from published figures: monotonic, PCIe < NVLink, full sharding and nodes cost more."""

from __future__ import annotations

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.errors import BadInput
from cheaptune.estimate.scaling import effective_throughput, scaling_efficiency, table


def test_every_figure_has_a_source_and_an_honest_label():
    def walk(node):
        if isinstance(node, dict) and "value" in node:
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from walk(v)

    figures = list(walk(table()))
    assert len(figures) >= 10
    for f in figures:
        assert f["source"].strip() and f["label"] in ("measured", "derived", "assumption")


@pytest.mark.parametrize("link", ["nvlink", "pcie"])
@pytest.mark.parametrize("sharding", ["ddp", "zero2", "zero3", "fsdp"])
def test_efficiency_falls_with_gpus_and_nodes(link, sharding):
    per_node = [scaling_efficiency(n, 1, link, sharding) for n in (1, 2, 3, 4, 6, 8)]
    assert per_node[0] == 1.0
    assert all(a >= b for a, b in zip(per_node, per_node[1:], strict=False)) and per_node[-1] < 1.0
    nodes = [scaling_efficiency(8, k, link, sharding) for k in (1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(nodes, nodes[1:], strict=False))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_pcie_is_below_nvlink_and_sxm(n):
    pcie = scaling_efficiency(n, interconnect="pcie")
    assert pcie < scaling_efficiency(n, interconnect="nvlink")
    assert pcie < scaling_efficiency(n, interconnect=resolve_gpu("H100"))  # catalog: sxm
    assert scaling_efficiency(n, interconnect=resolve_gpu("L4")) == pcie  # catalog: pcie


def test_full_sharding_ethernet_and_offload_cost_throughput():
    ddp = scaling_efficiency(8, 2, "nvlink", "ddp")
    assert scaling_efficiency(8, 2, "nvlink", "fsdp") < ddp
    assert scaling_efficiency(8, 2, "nvlink", "ddp", network="ethernet") < ddp
    assert scaling_efficiency(8, 1, "nvlink", "fsdp", offload=True) < scaling_efficiency(8, 1, "nvlink", "fsdp")


def test_effective_throughput_counts_gpus_waiting_for_the_last_node():
    base = effective_throughput(1000.0, 8, 2, "sxm")
    assert base.gpus == 16
    assert base.tokens_per_s == pytest.approx(16_000 * base.efficiency)
    assert base.idle_fraction == pytest.approx(1 - base.efficiency)
    waited = effective_throughput(1000.0, 8, 2, "sxm", node_wait_s=600, compute_s=3600)
    assert waited.tokens_per_s == base.tokens_per_s  # the wait does not slow training ...
    assert waited.idle_fraction > base.idle_fraction  # ... but 8 GPUs x 600 s are paid for nothing
    paid = 16 * 3600 + 8 * 600
    assert waited.idle_fraction == pytest.approx(1 - base.efficiency * 16 * 3600 / paid)


def test_bad_input_is_one_line():
    for call in (lambda: scaling_efficiency(0), lambda: scaling_efficiency(2, interconnect="infinityfabric"),
                 lambda: scaling_efficiency(2, sharding="zero9"), lambda: effective_throughput(0, 2),
                 lambda: scaling_efficiency(2, 2, network="carrier-pigeon")):
        with pytest.raises(BadInput) as err:
            call()
        assert "\n" not in str(err.value)
