"""The planner's micro-batch search: only micro-batches a plan runs, each point estimated once for every
memory size, and the same answer as estimate.memory.fit_micro_batch followed by candidates.planned_micro."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cheaptune.estimate.memory.memory import fit_with
from cheaptune.plan.candidates import planned_micro
from cheaptune.plan.microsearch import Points, largest_fit, planned_points

GIB = 1024**3


def test_planned_points_are_the_micro_batches_a_plan_runs():
    assert planned_points(16, 1, 64) == [1, 2, 3, 4, 6, 8, 16]
    assert planned_points(16, 4, 4) == [1, 2, 4]
    assert planned_points(100, 1, 64) == [b for b in range(1, 65) if planned_micro(b, 100)[0] == b]
    assert planned_points(1, 1, 64) == [1]


def _estimator(base: float, per_seq: float, curve: float, ckpt_saving: float, calls: list):
    """Close to affine in the micro-batch (`curve` bends it up, as the allocator's rounding can)."""
    def at(b: int, ckpt: bool):
        calls.append((b, ckpt))
        seq = per_seq * (0.3 if ckpt else 1.0)
        return SimpleNamespace(device_total_bytes=int(base - (ckpt_saving if ckpt else 0) + b * seq + curve * b * b))

    return at


@pytest.mark.parametrize("curve", [0.0, 0.02 * GIB, -0.01 * GIB])
@pytest.mark.parametrize("eb", [16, 7, 64])
def test_same_answer_as_fit_micro_batch_then_planned_micro(curve, eb):
    for mem_gib in (8, 12, 15, 16, 24, 32, 40, 48, 80, 141):
        budget = mem_gib * GIB * 0.9
        calls: list = []
        est = _estimator(6 * GIB, 1.5 * GIB, curve, 3 * GIB, calls)
        old = fit_with(est, budget, min(eb, 64))
        new = largest_fit(Points(est), planned_points(eb, 1, min(eb, 64)), budget)
        if old is None:
            assert new is None
            continue
        micro, _ = planned_micro(old.micro_batch, eb)
        assert new is not None and (new[0], new[1]) == (micro, old.grad_ckpt)
        assert new[2].device_total_bytes <= budget


def test_each_point_is_estimated_once_across_memory_sizes():
    calls: list = []
    points = Points(_estimator(6 * GIB, 1.5 * GIB, 0.0, 3 * GIB, calls))
    micros = planned_points(16, 1, 16)
    for mem_gib in (15, 16, 24, 32, 40, 48, 80, 94, 141):
        largest_fit(points, micros, mem_gib * GIB * 0.9)
    assert len(calls) == len(set(calls))  # no point twice
    assert len(calls) <= 2 * len(micros)  # at most every planned point, with and without checkpointing
    assert all(b in micros for b, _ in calls)


def test_an_optimistic_affine_guess_is_bisected_down():
    calls: list = []
    est = _estimator(6 * GIB, 1.0 * GIB, 0.4 * GIB, 0, calls)  # strongly convex: the line from 1 and 2 is optimistic
    budget = 20 * GIB
    micro, ckpt, e = largest_fit(Points(est), planned_points(16, 1, 16), budget)
    assert e.device_total_bytes <= budget and not ckpt
    nxt = planned_points(16, 1, 16)[planned_points(16, 1, 16).index(micro) + 1]
    assert est(nxt, False).device_total_bytes > budget  # the next planned micro-batch does not fit


def test_weights_floor_is_below_every_simulated_peak():
    """The floor a plan refuses a GPU below, without simulating, is under the least peak the simulation gives
    (micro-batch 1, checkpointing) for each method it applies to; QLoRA (a 4-bit base) has none."""
    from cheaptune.catalog.models import resolve_model
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
    from cheaptune.plan.microsearch import FLOOR_BYTES, weights_floor

    spec = resolve_model("SmolLM2-135M")
    for method, precision in (("lora", "bf16-mixed"), ("full", "bf16-true")):
        least = estimate_memory(EstimateRequest(model=spec.id, method=method, precision=precision, seq_len=64,
                                                grad_ckpt=True)).device_total_bytes
        floor = weights_floor(spec.params, method)
        assert FLOOR_BYTES[method] * spec.params < floor < least, method
    assert weights_floor(spec.params, "qlora") == 0


def test_a_gpu_under_the_floor_is_refused_without_a_simulation(monkeypatch, tiny_model_dir):
    from cheaptune.catalog.models import resolve_model
    from cheaptune.estimate.memory import memory
    from cheaptune.plan.candidates import WEIGHTS_FLOOR
    from cheaptune.plan.sources import real_fit

    def no_simulation(req):
        raise AssertionError("simulated")

    monkeypatch.setattr(memory, "estimate_memory", no_simulation)
    spec = resolve_model(str(tiny_model_dir))
    out = real_fit(spec, 64, 0.10, 8, effective_batch=4)("full", int(1.2 * GIB), "bf16-true")  # floor ~1.25 GiB
    assert not out.fits and out.basis == WEIGHTS_FLOOR and 1.2 * GIB < out.peak_bytes < 1.3 * GIB


def test_the_floor_changes_no_option_of_a_plan(monkeypatch, tiny_model_dir):
    """A plan over GPUs one of which is under the floor: it is refused, saying why, and every option (GPU,
    micro-batch, checkpointing, peak) is the one the plan has with the floor switched off."""
    from cheaptune.catalog.models import resolve_model
    from cheaptune.estimate.time.throughput import ModelShape
    from cheaptune.plan import sources
    from cheaptune.plan.planner import make_plan
    from cheaptune.plan.workload import Constraints, Workload
    from tests.plan.fakes import gpu, offer

    spec = resolve_model(str(tiny_model_dir))
    gpus = [gpu("Small", 1.2), gpu("Mid", 2.0), gpu("Big", 4.0)]  # the tiny model's floor: about 1.25 GiB
    offers = [offer("p", "Small", 0.1), offer("p", "Mid", 0.2), offer("p", "Big", 0.3)]
    w, c = Workload(200_000, seq_len=64, effective_batch=2), Constraints(methods=("full", "lora"), top=20)
    shape = ModelShape.from_config(spec.config, spec.params)

    def planned():
        fit = sources.real_fit(spec, 64, c.headroom, 8, effective_batch=2)
        r = make_plan(spec.id, shape, None, w, c, gpus, offers, fit)
        small = [e.reason for e in r.excluded if e.option["gpu"] == "Small"]
        return [(o.method, o.gpu, o.micro_batch, o.grad_ckpt, o.peak_vram_bytes) for o in r.options], small

    options, small = planned()
    assert len(small) == 2 and all("alone, with the CUDA context" in why for why in small)
    assert {o[1] for o in options} == {"Mid", "Big"}
    monkeypatch.setattr(sources, "weights_floor", lambda params, method: 0)
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tiny_model_dir.parent / "no_floor_home"))  # a cold fit cache
    plain, plain_small = planned()
    assert plain == options and len(plain_small) == 2 and not any("alone" in why for why in plain_small)
