"""Multi-GPU and multi-node candidates over hand-made catalogs and fake (per-GPU) memory fits."""

from __future__ import annotations

import pytest

from cheaptune.errors import Infeasible
from cheaptune.plan.planner import make_plan
from cheaptune.plan.save import to_planfile
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GIB, GPUS, NEEDS, OFFERS, SHAPE_7B, fake_fit, fake_multi_fit, offer

W = Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16)
BIG = dict(NEEDS, full=200 * GIB)  # a full fine-tune that fits no single GPU (80 GiB at most here)
MULTI_OFFERS = OFFERS + [
    offer("bigcloud", "A100-80GB", 13.60, count=4),
    offer("bigcloud", "A100-80GB", 27.20, count=8),
    offer("gpucloud", "H100", 20.00, count=8, unit=60),
]


def plan(c=Constraints(), needs=None, offers=MULTI_OFFERS, w=W, calls=None):
    needs = needs or NEEDS
    return make_plan("test", SHAPE_7B, 4096, w, c, GPUS, offers, fake_fit(needs=needs),
                     multi_fit=fake_multi_fit(needs=needs, calls=calls))


def startup_h(o):
    return sum(o.details["startup_s"].values()) / 3600


def test_model_that_fits_no_single_gpu_gets_a_multi_gpu_option_paying_every_gpu():
    r = plan(Constraints(methods=("full",), top=20), needs=BIG)
    assert r.options and all(o.total_gpus > 1 for o in r.options)
    counts = {(o.gpu, o.gpu_count) for o in r.options}
    assert counts == {("A100-80GB", 4), ("A100-80GB", 8), ("H100", 8)}  # the instances that are offered
    for o in r.options:
        assert o.peak_vram_bytes <= o.gpu_memory_bytes * 0.9
        assert o.micro_batch * o.grad_accum * o.total_gpus >= W.effective_batch
        assert o.tokens_per_s == pytest.approx(o.details["time"]["tokens_per_s"], abs=0.1)
        assert o.details["time"]["gpus"] == o.total_gpus
        # the instance price covers all its GPUs, billed from start-up to the end (final save, upload)
        billed_h = startup_h(o) + o.details["train_hours"] + sum(o.details["end_s"].values()) / 3600
        rounding = o.billing_unit_s / 3600 * o.price_per_hour  # billed in whole units
        assert o.price_per_hour * billed_h - 1e-3 <= o.cost["compute"] <= o.price_per_hour * billed_h + rounding + 1e-3
    by = {(o.gpu, o.gpu_count): o for o in r.options}
    # 200 GiB over 4 GPUs fits FSDP but not ZeRO-3 (fp32 master weights); over 8 ZeRO-3 fits and is tried first
    assert by[("A100-80GB", 4)].sharding == "fsdp" and by[("A100-80GB", 8)].sharding == "zero3"
    assert any(n.startswith("full tried on several GPUs: fits no single GPU") for n in r.notes)


def test_multi_gpu_costs_more_gpu_hours_than_one_gpu_of_the_same_kind():
    r = plan(Constraints(methods=("lora",), optimize="time", gpus=("A100-80GB",), spot="never", top=30))
    one = min((o for o in r.options if o.total_gpus == 1), key=lambda o: o.hours)
    eight = min((o for o in r.options if o.total_gpus == 8), key=lambda o: o.hours)
    assert eight.hours < one.hours  # faster...
    gpu_h = lambda o: o.details["train_hours"] * o.total_gpus  # noqa: E731
    assert gpu_h(eight) > gpu_h(one)  # ...but communication makes it spend more GPU-hours
    assert r.recommended.total_gpus == 8


def test_deadline_forces_more_gpus_and_ddp_is_preferred_when_it_fits():
    single = plan(Constraints(methods=("lora",), optimize="time", max_gpus=1))
    assert all(o.total_gpus == 1 for o in single.options)
    deadline = single.recommended.hours * 0.7
    r = plan(Constraints(methods=("lora",), deadline_hours=deadline))
    assert r.options and all(o.hours <= deadline for o in r.options)
    assert all(o.total_gpus > 1 for o in r.options)
    assert all(o.sharding == "ddp" for o in r.options)  # LoRA's state fits every GPU whole
    assert any("misses the deadline on one GPU" in n for n in r.notes)
    assert any(e.kind == "deadline" and e.option["gpu_count"] == 1 for e in r.excluded)


def test_no_multi_gpu_work_when_one_gpu_serves_every_method():
    calls = []
    r = plan(calls=calls)
    assert calls == [] and all(o.total_gpus == 1 for o in r.options)


def test_max_gpus_one_keeps_single_gpu_and_advises_more():
    with pytest.raises(Infeasible) as err:
        plan(Constraints(methods=("full",), max_gpus=1), needs=BIG)
    advice = " ".join(err.value.result.advice)
    assert "--max-gpus 8" in advice
    r = plan(Constraints(methods=("full", "lora"), max_gpus=1), needs=BIG)
    assert any(line.startswith("full fine-tune on") and "--max-gpus 8" in line for line in r.why_not)


def test_why_not_names_the_multi_gpu_option_for_a_method_that_fits_no_single_gpu():
    r = plan(Constraints(methods=("full", "lora"), top=40), needs=BIG)
    line = next(x for x in r.why_not if x.startswith("full fine-tune on"))
    assert "needs 200.0 GiB" in line and "it fits" in line
    assert any(f"on {o.hardware()} it fits" in line for o in r.options if o.method == "full")


def test_several_nodes_only_when_one_node_cannot_fit():
    huge = dict(NEEDS, full=3000 * GIB)  # 8 x 80 GiB cannot hold it even sharded; 16 can with offload
    offers = [offer("bigcloud", "A100-80GB", 27.20, count=8), offer("bigcloud", "A100-80GB", 3.40)]
    with pytest.raises(Infeasible) as err:
        plan(Constraints(methods=("full",)), needs=huge, offers=offers)
    assert "several nodes (--max-gpus 16" in " ".join(err.value.result.advice)
    r = plan(Constraints(methods=("full",), max_gpus=32), needs=huge, offers=offers)
    best = r.recommended
    assert best.num_nodes >= 2 and best.gpu_count == 8 and best.sharding.startswith("fsdp")
    # every node is billed; the ones that came up first also wait for the last
    billed_h = startup_h(best) + best.details["train_hours"]
    assert best.cost["compute"] > best.num_nodes * best.price_per_hour * billed_h
    assert best.details["scale_out"]["node_wait_s"] > 0 and best.details["scale_out"]["communication_s_per_step"] > 0
    assert any("several nodes tried" in n for n in r.notes)


def test_plan_file_records_sharding_and_nodes():
    r = plan(Constraints(methods=("full",)), needs=BIG)
    pf = to_planfile(r, "test")
    best = r.recommended
    assert pf.train.sharding == best.sharding and pf.offer.gpu_count == best.gpu_count
    assert pf.offer.num_nodes == best.num_nodes
    for alt in pf.alternatives:
        assert (alt.gpu, alt.gpu_count, alt.num_nodes) == (best.gpu, best.gpu_count, best.num_nodes)


def test_a_budget_that_rules_out_fitting_options_neither_says_they_fit_no_gpu_nor_tries_offload():
    calls = []
    with pytest.raises(Infeasible) as err:
        plan(Constraints(budget_usd=0.01), calls=calls)
    notes = err.value.result.notes
    assert not any("fits no single GPU" in n for n in notes), notes  # full fits an A100-80GB: it is the budget
    assert any(n.startswith("full tried on several GPUs: over the budget on one GPU") for n in notes), notes
    assert calls and not any(offload for *_, offload in calls)  # offload only for a model no GPU count holds
