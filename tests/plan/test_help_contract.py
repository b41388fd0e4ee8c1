"""The plan does what `plan --max-gpus` help says: several GPUs only for a method one GPU does not serve
(memory, deadline, budget) or under --optimize time; and a why-not line never says several GPUs make a
method fit when one larger GPU does (DDP keeps the whole model state on every GPU)."""

from __future__ import annotations

from cheaptune.plan.planner import make_plan
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, NEEDS, OFFERS, SHAPE_7B, fake_fit, fake_multi_fit, offer

W = Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16)
# a 2-GPU RTX 4090 instance for less than two single ones: the case that drew a 2x DDP recommendation
CHEAP_PAIR = OFFERS + [offer("pairs", "RTX4090", 0.30, spot=True, rate=0.1, count=2),
                       offer("pairs", "A100-80GB", 1.50, spot=True, rate=0.1, count=2)]


def plan(c: Constraints, calls: list | None = None):
    return make_plan("test", SHAPE_7B, 4096, W, c, GPUS, CHEAP_PAIR, fake_fit(needs=NEEDS),
                     multi_fit=fake_multi_fit(needs=NEEDS, calls=calls))


def test_methods_one_gpu_serves_are_not_tried_on_several():
    calls: list = []
    r = plan(Constraints(top=50), calls)
    assert calls == [] and r.options and all(o.total_gpus == 1 for o in r.options)
    assert not any("tried on several GPUs" in n for n in r.notes)


def test_optimize_time_still_tries_several_gpus():
    r = plan(Constraints(methods=("lora",), optimize="time", top=50))
    assert any(o.total_gpus > 1 for o in r.options)
    assert any("more GPUs finish sooner (--optimize time)" in n for n in r.notes)


def test_why_not_names_the_one_gpu_that_fits_not_a_ddp_pair():
    r = plan(Constraints(methods=("full", "lora"), optimize="time", top=50))  # multi-GPU options present
    assert any(o.method == "full" and o.sharding == "ddp" for o in r.options)  # the pair that used to be named
    line = next(x for x in r.why_not if x.startswith("full fine-tune on RTX4090"))
    assert "ddp" not in line and ("on one A100-80GB it fits" in line or "on one H100 it fits" in line)
