"""The network between nodes: named, a rate per node, or an instance type's stated rate (data/interconnect.yaml)."""

from __future__ import annotations

import pytest
import yaml

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.errors import BadInput
from cheaptune.estimate.time import throughput as tp
from cheaptune.estimate.time.scaling import (
    INTERCONNECT,
    Layout,
    communication,
    inter_node_gbs,
    intra_node_gbs,
    network_gbit,
    serial_link,
)


def test_a_rate_or_an_instance_type_gives_gbit_per_node_and_a_name_gives_none():
    doc = yaml.safe_load(INTERCONNECT.read_text())["instance_network_gbit"]
    assert doc["source"] and doc["label"] == "source" and doc["values"]["g5.48xlarge"] == 100
    assert network_gbit("ethernet") is None and network_gbit("infiniband") is None
    assert network_gbit("100gbit") == 100 and network_gbit("12.5gbit") == 12.5
    assert network_gbit("g5.12xlarge") == 40 and network_gbit("g5.4xlarge") == 25


@pytest.mark.parametrize("bad", ["fast", "100gbps", "100 gbit", "0gbit", "99999gbit", "g5.1337xlarge", ""])
def test_a_network_that_is_none_of_them_is_one_line(bad):
    with pytest.raises(BadInput) as err:
        Layout(8, 2, "fsdp", network=bad)
    assert "\n" not in str(err.value) and "gbit" in str(err.value)


def test_the_rate_form_agrees_with_the_ethernet_default_and_scales_with_the_rate():
    """25 Gbit/s at the network_rate efficiency is the ethernet default (3.0 GB/s), and a ring at the NIC takes
    4x less time at 100 Gbit/s than at 25."""
    table = tp.load_table()
    assert inter_node_gbs("25gbit", table) == pytest.approx(inter_node_gbs("ethernet", table))
    assert inter_node_gbs("g5.48xlarge", table) == pytest.approx(4 * inter_node_gbs("25gbit", table))
    g, size = resolve_gpu("H100"), 16e9
    slow = communication(Layout(1, 16, "zero3", network="25gbit"), g, size, size, table)
    fast = communication(Layout(1, 16, "zero3", network="100gbit"), g, size, size, table)
    assert slow.per_micro_s == pytest.approx(4 * fast.per_micro_s)


def test_one_gpu_per_node_rings_at_the_nic_alone_and_the_slowest_hop_wins_otherwise():
    """16 x g5.4xlarge (one A10G each) never crosses the A10G's measured in-node link; 4 x g5.48xlarge (8 each)
    runs at the lower of that link and the node's 100 Gbit/s."""
    table, g, size = tp.load_table(), resolve_gpu("A10G"), 8e9
    wide = communication(Layout(1, 16, "zero3", network="100gbit"), g, size, size, table)
    assert wide.per_micro_s == pytest.approx(3 * 15 / 16 * size / (inter_node_gbs("100gbit", table) * 1e9))
    deep = communication(Layout(8, 4, "zero3", network="g5.48xlarge"), g, size, size, table)
    assert intra_node_gbs(g, table) < inter_node_gbs("g5.48xlarge", table)
    assert deep.per_micro_s == pytest.approx(3 * 31 / 32 * size / (intra_node_gbs(g, table) * 1e9))


def test_a_stated_rate_is_ip_sockets_a_serial_link_infiniband_is_not():
    h100 = resolve_gpu("H100")
    assert serial_link(Layout(8, 2, "fsdp", network="100gbit"), h100)
    assert serial_link(Layout(8, 2, "fsdp", network="g5.48xlarge"), h100)
    assert not serial_link(Layout(8, 2, "fsdp", network="infiniband"), h100)
    assert not serial_link(Layout(8, 1, "fsdp", network="100gbit"), h100)  # one node: no network


def test_every_link_fact_carries_its_source_label_and_dates():
    doc = yaml.safe_load(INTERCONNECT.read_text())
    facts = [doc["no_peer_to_peer"], doc["network_rate"]["efficiency"], doc["instance_network_gbit"],
             doc["serial_link_overlap"], *doc["measured_busbw_gbs"].values()]
    for fact in facts:
        assert fact["source"].strip() and fact["read"] and fact["source_date"]
        assert fact.get("label", "measured") in ("measured", "fitted", "assumption", "source")
