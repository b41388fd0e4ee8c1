"""The planner turns the speed options on where they pay (estimate.speedups.for_gpu), says so, and saves them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.estimate.speedups import for_gpu, table
from cheaptune.plan.planner import make_plan
from cheaptune.plan.save import to_planfile
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

W = Workload(tokens=20_000_000, epochs=1, seq_len=2048, effective_batch=16)
CAPABILITY = {"RTX4090": "8.9", "A100-80GB": "8.0", "H100": "9.0", "T4": "7.5"}
BOARDS = [SimpleNamespace(**{**vars(g), "compute_capability": CAPABILITY[g.name], "vendor": "nvidia"}) for g in GPUS]


def plan(speedups: bool = True):
    return make_plan("test-7b", SHAPE_7B, 4096, W, Constraints(speedups=speedups), BOARDS, OFFERS, fake_fit())


@pytest.mark.parametrize(("name", "on"), [("H100", True), ("A100-80GB", True), ("RTX 4090", True), ("T4", False),
                                          ("V100", False)])
def test_options_only_on_nvidia_boards_with_triton_capability(name, on):
    got = for_gpu(resolve_gpu(name))
    assert got.options == (("liger_kernel", "torch_compile") if on else ())
    # Liger and compile fuse the same ops: the better factor counts, not the product
    expected = max(float(table()["liger_kernel"]["factor"]), float(table()["torch_compile"]["factor"]))
    assert got.factor == pytest.approx(expected if on else 1.0)
    assert for_gpu(resolve_gpu(name), enabled=False).options == ()


def test_plan_applies_the_factor_says_so_and_saves_the_options():
    fast, plain = plan(), plan(speedups=False)
    for o in fast.options:
        twin = next(p for p in plain.options if (p.method, p.gpu, p.provider, p.spot) == (o.method, o.gpu, o.provider, o.spot))
        assert o.tokens_per_s == pytest.approx(twin.tokens_per_s * o.details["speedups"]["factor"], rel=1e-3)
        assert (o.details["speedups"]["options"] == []) == (o.gpu == "T4")
    best = fast.recommended
    line = next(n for n in fast.notes if n.startswith("speed-ups on:"))
    assert "liger_kernel x1.10" in line and "https://" in line and best.details["speedups"]["options"]
    assert "together x1.27" in line and "not multiplied" in line  # overlapping fusions counted once
    saved = to_planfile(fast, "org/test-7b").train
    assert saved.liger_kernel and saved.torch_compile
    assert saved.speedup.factor == pytest.approx(best.details["speedups"]["factor"])  # time model == saved settings
    off = saved.model_copy(update={"liger_kernel": False, "torch_compile": False})
    assert saved.request("org/test-7b") == off.request("org/test-7b")  # the fit's request: the same peak


def test_no_speedups_keeps_them_off_everywhere():
    r = plan(speedups=False)
    assert all(o.details["speedups"]["options"] == [] for o in r.options)
    assert not any(n.startswith("speed-ups on:") for n in r.notes)
    saved = to_planfile(r, "org/test-7b").train
    assert not saved.liger_kernel and not saved.torch_compile


def test_cli_plan_no_speedups(run_cli):
    args = ("plan", "meta-llama/Llama-2-7b-hf", "--examples", "3000", "--avg-tokens", "400", "--epochs", "3",
            "--seq-len", "1024", "--method", "qlora", "--gpu", "RTX4090", "--json")
    docs = {}
    for flag in ((), ("--no-speedups",)):
        code, out, err = run_cli(*args, *flag)
        assert code == 0, err
        docs[flag] = json.loads(out)
    on, off = docs[()], docs[("--no-speedups",)]
    best_on, best_off = on["recommended"], off["recommended"]
    assert best_on["gpu"] == "RTX4090"  # compute capability 8.9: both options (T4, 7.5: none, tested above)
    assert best_on["details"]["speedups"]["options"] == ["liger_kernel", "torch_compile"]
    assert any(n.startswith("speed-ups on: liger_kernel x1.10") for n in on["notes"])
    assert best_off["details"]["speedups"]["options"] == []
    assert not any(n.startswith("speed-ups on:") for n in off["notes"])
    fast = {(o["gpu"], o["provider"], o["spot"]): o["tokens_per_s"] for o in on["options"]}
    slow = {(o["gpu"], o["provider"], o["spot"]): o["tokens_per_s"] for o in off["options"]}
    shared = [k for k in fast if k in slow]
    both = for_gpu(resolve_gpu("RTX 4090")).factor
    assert shared and all(fast[k] == pytest.approx(slow[k] * (both if k[0] == "RTX4090" else 1), rel=1e-3)
                          for k in shared)
