"""`plan --network`: the link between nodes a multi-node option is timed over, stated or assumed, and said."""

from __future__ import annotations

import dataclasses

import pytest

from cheaptune.errors import BadInput
from cheaptune.plan import planfile
from cheaptune.plan.planner import make_plan
from cheaptune.plan.save import to_planfile
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GIB, GPUS, NEEDS, SHAPE_7B, fake_fit, fake_multi_fit, offer

W = Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16)
HUGE = dict(NEEDS, full=3000 * GIB)  # 8 x 80 GiB cannot hold it even sharded: only several nodes serve it
NODE_OFFERS = [offer("bigcloud", "A100-80GB", 27.20, count=8), offer("bigcloud", "A100-80GB", 3.40)]
MULTI_NODE = Constraints(methods=("full",), max_gpus=32)


def plan(w: Workload, c: Constraints = MULTI_NODE, needs=HUGE):
    return make_plan("test", SHAPE_7B, 4096, w, c, GPUS, NODE_OFFERS, fake_fit(needs=needs),
                     multi_fit=fake_multi_fit(needs=needs))


def test_not_stated_the_multi_node_option_is_timed_over_ethernet_and_says_it_assumes_it():
    r = plan(W)
    best = r.recommended
    assert best.num_nodes >= 2 and best.network == "ethernet"
    assert "(ethernet)" in best.hardware() and best.details["scale_out"]["network"] == "ethernet"
    assert any("between nodes we assume ethernet" in n and "--network" in n for n in r.notes)


def test_a_stated_network_times_the_nodes_link_goes_into_the_plan_file_and_the_notes(tmp_path):
    slow, fast = plan(W).recommended, plan(dataclasses.replace(W, network="infiniband"))
    best = fast.recommended
    assert best.network == "infiniband" and "(infiniband)" in best.hardware()
    assert (best.num_nodes, best.gpu_count) == (slow.num_nodes, slow.gpu_count)
    # the faster link exposes less communication per step than the 25 Gbit/s Ethernet default
    assert best.details["scale_out"]["communication_s_per_step"] < slow.details["scale_out"]["communication_s_per_step"]
    assert best.hours < slow.hours
    assert any("between nodes: infiniband, as --network states" in n for n in fast.notes)
    pf = to_planfile(fast, "test")
    assert pf.offer.network == "infiniband" and all(a.network == "infiniband" for a in pf.alternatives)
    planfile.save(pf, tmp_path / "plan.yaml")
    assert planfile.load(tmp_path / "plan.yaml").offer.network == "infiniband"


def test_a_rate_per_node_lands_between_ethernet_and_infiniband():
    hours = {n: plan(dataclasses.replace(W, network=n)).recommended.hours for n in ("25gbit", "100gbit", "infiniband")}
    assert hours["25gbit"] > hours["100gbit"] > hours["infiniband"]


def test_a_stated_network_no_option_used_is_said_and_one_node_rows_carry_none():
    r = plan(dataclasses.replace(W, network="infiniband"), Constraints(methods=("lora",)), needs=NEEDS)
    assert all(o.num_nodes == 1 and o.network is None for o in r.options)
    assert "--network infiniband not used: no option here needed several nodes" in r.notes
    assert to_planfile(r, "test").offer.network is None


def test_a_hand_edited_plan_file_with_an_unknown_network_is_one_line(tmp_path):
    pf = to_planfile(plan(W), "test")
    bad = pf.model_copy(update={"offer": pf.offer.model_copy(update={"network": "carrier-pigeon"})})
    planfile.save(bad, tmp_path / "plan.yaml")
    with pytest.raises(BadInput, match=r"plan file .*offer\.network: .*'carrier-pigeon' is not ethernet"):
        planfile.load(tmp_path / "plan.yaml")


@pytest.mark.parametrize("args, said", [
    (("--network", "carrier-pigeon"), "network 'carrier-pigeon' is not ethernet, infiniband"),
    (("--network", "5000gbit"), "a rate from"),
    (("--network", "infiniband", "--objective", "grpo"), "--network is not planned for --objective grpo"),
    (("--network", "infiniband", "--config", "run.yaml"), "--network is not planned with --config"),
])
def test_plan_refuses_a_bad_network_in_one_line_and_writes_nothing(run_cli, tmp_path, args, said):
    save = tmp_path / "plan.yaml"
    code, out, err = run_cli("plan", "llama-2-7b", "--tokens", "1e6", *args, "--save", str(save))
    assert code == 2 and said in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not save.exists()
