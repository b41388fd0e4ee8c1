"""Communication by sharding strategy over the real link: bytes, bandwidth, overlap."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.errors import BadInput
from cheaptune.estimate.time import throughput as tp
from cheaptune.estimate.time.scaling import (
    INTERCONNECT,
    Comm,
    Layout,
    communication,
    exposed_seconds,
    intra_node_gbs,
    no_peer_to_peer,
    serial_link,
)

JOBS = Path(__file__).parents[2] / "bench" / "data" / "jobs_public.csv"
LLAMA_8B = tp.ModelShape(params=8_030_000_000, hidden=4096, layers=32, vocab=128256, tied_embeddings=False)
LORA_PARAMS = 42_000_000


def run(gpu: str, method: str, layout: Layout, micro: int = 2, ckpt: bool = True) -> tp.StepTime:
    trainable = 0 if method == "full" else LORA_PARAMS
    return tp.step_time(tp.Job(LLAMA_8B, method, 2048, micro, ckpt, trainable), resolve_gpu(gpu), layout)


def test_every_constant_has_a_label_and_fitted_ones_name_their_rows():
    table = tp.load_table()
    own = [s for s in table["stacks"].values() if "same_as" not in s]
    assert own and all(s["rows"] for s in own)
    fixed = [e for s in own for e in s["fixed_per_layer_s"].values()]
    for entry in (*table["overlap"].values(), *fixed, table["links"]["no_p2p_factor"]):
        assert entry["label"] in ("measured", "fitted", "assumption")
    assert table["sustained_fraction"]["source"].startswith("bench/data/gemm_measured.csv")
    assert all(b["label"] == "assumption" or b.get("row") for b in table["sustained_fraction"]["boards"].values())


def test_links_nvlink_faster_than_pcie_and_geforce_has_no_peer_to_peer():
    table = tp.load_table()
    assert intra_node_gbs(resolve_gpu("A100-80GB"), table) > 5 * intra_node_gbs(resolve_gpu("L4"), table)
    assert intra_node_gbs(resolve_gpu("RTX4090"), table) < intra_node_gbs(resolve_gpu("L40S"), table)


def test_a10g_has_no_peer_to_peer_and_its_measured_nccl_bandwidth():
    """data/interconnect.yaml: AWS g5's A10Gs cannot write to each other peer-to-peer, and NCCL's busbw measured
    on 4 of them (3.1 GB/s) replaces the PCIe formula, a quarter of the 12.8 GB/s the formula gave; the A10 (same
    GA102, same PCIe gen4, no measurement) keeps the formula's full PCIe rate."""
    table = tp.load_table()
    doc = yaml.safe_load(INTERCONNECT.read_text())
    entry, measured = doc["no_peer_to_peer"], doc["measured_busbw_gbs"]["A10G"]
    assert "A10G" in no_peer_to_peer() and entry["source"] and entry["source_date"] != entry["read"]
    assert measured["label"] == "measured" and "github.com" in measured["source"] and measured["source_date"] != measured["read"]
    a10g, a10 = intra_node_gbs(resolve_gpu("A10G"), table), intra_node_gbs(resolve_gpu("A10"), table)
    assert a10g == measured["value"] and a10g < 0.3 * a10 * table["links"]["no_p2p_factor"]["value"]
    assert a10 == pytest.approx(32 * table["links"]["pcie_efficiency"]["value"])


def test_lora_ddp_sends_only_adapter_gradients():
    one = run("RTX4090", "lora", Layout())
    two = run("RTX4090", "lora", Layout(2, 1, "ddp"))
    assert two.parts["communication"] < 0.02 * two.step_seconds
    assert two.tokens_per_s / (2 * one.tokens_per_s) > 0.95
    table, g = tp.load_table(), resolve_gpu("RTX4090")
    lora = communication(Layout(2, 1, "ddp"), g, 0, LORA_PARAMS * 4, table)
    full = communication(Layout(2, 1, "ddp"), g, 0, LLAMA_8B.params * 2, table)
    assert full.per_step_s == pytest.approx(lora.per_step_s * LLAMA_8B.params * 2 / (LORA_PARAMS * 4))
    assert full.per_step_s > 1.0 and lora.per_micro_s == 0  # 16 GB over a GeForce link: seconds


def test_fsdp_with_a_4bit_base_gathers_less_than_bf16():
    table = tp.load_table()
    q = communication(Layout(2, 1, "fsdp"), resolve_gpu("RTX4090"), LLAMA_8B.params * 0.56, 1e8, table)
    b = communication(Layout(2, 1, "fsdp"), resolve_gpu("RTX4090"), LLAMA_8B.params * 2.0, 1e8, table)
    assert q.per_micro_s < 0.35 * b.per_micro_s and q.per_step_s == 0


def test_nodes_network_and_offload_cost_time():
    ib = run("H100", "full", Layout(8, 2, "fsdp", network="infiniband"))
    eth = run("H100", "full", Layout(8, 2, "fsdp", network="ethernet"))
    node = run("H100", "full", Layout(8, 1, "fsdp"))
    assert eth.parts["communication"] > ib.parts["communication"] > node.parts["communication"]
    off = run("H100", "full", Layout(8, 1, "fsdp", offload=True))
    assert off.step_seconds > node.step_seconds


def test_across_nodes_one_ring_over_every_rank_at_the_nic():
    """nccl-tests doc/PERFORMANCE.md: t = S(n-1)/(nB) over all n ranks, B the slowest hop. 2 nodes x 8 and
    16 nodes x 1 are the same 16-rank ring through the same NIC (a two-level sum gave 2 x 8 half the NIC time)."""
    table, g, size = tp.load_table(), resolve_gpu("H100"), 16e9
    nic = table["links"]["inter_node_gbs"]["ethernet"]["value"] * 1e9
    two = communication(Layout(8, 2, "zero3"), g, size, size, table)
    wide = communication(Layout(1, 16, "zero3"), g, size, size, table)
    assert two.per_micro_s == pytest.approx(3 * 15 / 16 * size / nic)
    assert wide.per_micro_s == pytest.approx(two.per_micro_s)
    one = communication(Layout(8, 1, "zero3"), g, size, size, table)
    assert one.per_micro_s == pytest.approx(3 * 7 / 8 * size / (intra_node_gbs(g, table) * 1e9))


def test_fsdp_reduce_scatters_on_the_last_micro_step_zero3_on_every_one():
    """transformers trainer.py: no_sync on every micro-batch but the last unless DeepSpeed; so FSDP's
    gradient reduce-scatter is paid once per optimizer step and its gathers every micro-step."""
    table, g, size = tp.load_table(), resolve_gpu("A100-80GB"), 16e9
    fsdp = communication(Layout(8, 1, "fsdp"), g, size, size, table)
    zero3 = communication(Layout(8, 1, "zero3"), g, size, size, table)
    assert fsdp.last_micro_s == pytest.approx(zero3.per_micro_s / 3) and fsdp.per_micro_s == pytest.approx(
        2 * zero3.per_micro_s / 3)
    job = tp.Job(LLAMA_8B, "full", 512, 1, True, 0, grad_accum=8)
    f, z = (tp.step_time(job, g, Layout(8, 1, s)) for s in ("fsdp", "zero3"))
    assert f.parts["communication"] <= z.parts["communication"] and f.parts["compute"] == z.parts["compute"]


def test_serial_links_hide_less_of_the_gathers(monkeypatch):
    """Ethernet between nodes and the A10G (no usable peer-to-peer) leave FSDP/ZeRO-3's transfers unhidden
    (interconnect.yaml serial_link_overlap); NVLink, InfiniBand and GeForce's SHM path keep overlap.sharded."""
    from cheaptune.estimate.time import scaling

    table, links = tp.load_table(), scaling._interconnect()
    entry = yaml.safe_load(INTERCONNECT.read_text())["serial_link_overlap"]
    assert entry["label"] == "fitted" and "job_accuracy.py --write-data" in entry["source"]
    jobs = {r["id"]: r["source"] for r in csv.DictReader(JOBS.open())}
    named = [x.split(" (") for x in entry["rows"].split(", ")]  # "JR1 (ray-deepspeed-template), ..."
    assert named and all(jobs[i] == src.rstrip(")") for i, src in named)
    assert serial_link(Layout(4, 1, "fsdp"), resolve_gpu("A10G")) and not serial_link(Layout(2, 1, "fsdp"), resolve_gpu("RTX4090"))
    assert not serial_link(Layout(8, 1, "fsdp"), resolve_gpu("A100-80GB")) and not serial_link(Layout(1, 1), resolve_gpu("A10G"))
    assert serial_link(Layout(8, 2, "fsdp", network="ethernet"), resolve_gpu("H100"))
    assert not serial_link(Layout(8, 2, "fsdp", network="infiniband"), resolve_gpu("H100"))
    assert links["serial_link_overlap"]["value"] < table["overlap"]["sharded"]["value"]
    staged = communication(Layout(4, 1, "fsdp"), resolve_gpu("A10G"), 5e9, 5e9, table)
    assert staged.serial_link
    exposed = exposed_seconds(staged, Layout(4, 1, "fsdp"), 1, 10.0, 32, table)
    monkeypatch.setattr(scaling, "_interconnect", lambda: {**links, "serial_link_overlap": table["overlap"]["sharded"]})
    assert exposed > exposed_seconds(staged, Layout(4, 1, "fsdp"), 1, 10.0, 32, table)


def test_offload_of_a_4bit_base_costs_a_few_percent_not_half():
    on = run("RTX4090", "qlora", Layout(2, 1, "fsdp", offload=True))
    off = run("RTX4090", "qlora", Layout(2, 1, "fsdp"))
    assert 0.8 < on.tokens_per_s / off.tokens_per_s <= 1.0


def test_bad_layouts_are_one_line_errors():
    for bad in (dict(gpus_per_node=0), dict(sharding="zero9"), dict(network="carrier-pigeon"),
                dict(gpus_per_node=2, sharding="ddp", offload=True)):
        with pytest.raises(BadInput):
            Layout(**bad)


def test_a_tables_own_serial_link_overlap_overrides_the_link_files():
    """The job bench times each fold with its own fitted overlap (bench/job_accuracy.py): a table carrying
    serial_link_overlap 1.0 exposes what overlap.sharded 1.0 exposes on a non-serial link."""
    table = tp.load_table()
    staged = communication(Layout(4, 1, "fsdp"), resolve_gpu("A10G"), 5e9, 5e9, table)
    hidden = exposed_seconds(staged, Layout(4, 1, "fsdp"), 2, 10.0, 32, {**table, "serial_link_overlap": {"value": 1.0}})
    plain = Comm(staged.per_step_s, staged.per_micro_s, staged.last_micro_s, serial_link=False)
    assert hidden == pytest.approx(exposed_seconds(plain, Layout(4, 1, "fsdp"), 2, 10.0, 32, table))
    assert hidden < exposed_seconds(staged, Layout(4, 1, "fsdp"), 2, 10.0, 32,
                                    {**table, "serial_link_overlap": {"value": 0.0}})
