"""The planner turns a speed option on only where it was measured for that method class on that vendor and arch
(estimate.speedups.for_gpu), says so, and saves it; elsewhere it says "possible, unmeasured"."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cheaptune.catalog.gpus import list_gpus, resolve_gpu
from cheaptune.estimate.time.ceilings import capped
from cheaptune.estimate.time.speedups import PLANNED, describe_unmeasured, for_gpu, method_class, table
from cheaptune.plan.planner import make_plan
from cheaptune.plan.save import to_planfile
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

W = Workload(tokens=20_000_000, epochs=1, seq_len=2048, effective_batch=16)
CAPABILITY = {"RTX4090": "8.9", "A100-80GB": "8.0", "H100": "9.0", "T4": "7.5"}
BOARDS = [SimpleNamespace(**{**vars(g), "compute_capability": CAPABILITY[g.name], "vendor": "nvidia"}) for g in GPUS]
COMPILE = float(table()["torch_compile"]["factor"])


def plan(speedups: bool = True, method: str | None = None):
    c = Constraints(speedups=speedups, **({"methods": (method,)} if method else {}))
    return make_plan("test-7b", SHAPE_7B, 4096, W, c, BOARDS, OFFERS, fake_fit())


@pytest.mark.parametrize(("name", "method", "on"), [
    ("A100-80GB", "full", ("torch_compile",)),  # torchtune's full fine-tune on an A100: measured there
    ("RTX 3090", "full", ("torch_compile",)),  # the same vendor and arch (Ampere)
    ("A100-80GB", "lora", ()), ("A100-80GB", "qlora", ()),  # never measured for adapters
    ("H100", "full", ()), ("H100", "lora", ()), ("RTX 4090", "full", ()),  # never measured on Hopper or Ada
    ("T4", "full", ()), ("MI300X", "full", ())])  # no Triton capability / not NVIDIA: cannot run
def test_options_only_where_measured_for_the_method_class_vendor_and_arch(name, method, on):
    got = for_gpu(resolve_gpu(name), method)
    assert got.options == on and got.priced == on
    assert got.factor == pytest.approx(COMPILE if on else 1.0)
    assert for_gpu(resolve_gpu(name), method, enabled=False).options == ()


def test_an_unmeasured_option_is_possible_with_its_published_figure():
    got = for_gpu(resolve_gpu("H100"), "lora")
    assert got.unmeasured == PLANNED and got.factor == 1.0
    line = describe_unmeasured(got, "lora", resolve_gpu("H100"))
    assert line.startswith("possible, unmeasured for adapter fine-tunes on nvidia hopper")
    assert "torch_compile x1.27 (torchtune, Llama 3.2 3B full fine-tune" in line and "off, not priced" in line
    # a config that asks for compile still runs it, priced at x1
    fixed = for_gpu(resolve_gpu("H100"), "lora", ("torch_compile",))
    assert fixed.options == ("torch_compile",) and fixed.priced == () and fixed.factor == 1.0


def test_no_factor_applies_that_was_not_measured_for_the_method_class():
    """Over the whole catalog: every priced option has a measured entry for (method class, vendor, arch)."""
    for gpu in list_gpus():
        for method in ("full", "lora", "qlora"):
            got = for_gpu(gpu, method)
            for name in got.priced:
                keys = {(m["method_class"], m["vendor"], m["arch"]) for m in table()[name]["measured"]}
                assert (method_class(method), gpu.vendor, gpu.arch) in keys


def test_plan_applies_only_measured_factors_says_so_and_saves_the_options():
    fast, plain = plan(method="full"), plan(speedups=False, method="full")
    for o in fast.options:
        twin = next(p for p in plain.options if (p.method, p.gpu, p.provider, p.spot) == (o.method, o.gpu, o.provider, o.spot))
        factor = o.details["speedups"]["factor"]
        # the factor applies up to the board's MFU ceiling (estimate.time.ceilings), which then says so
        want, line = capped(twin.details["time"]["tokens_per_s"] * factor, twin.details["time"]["mfu"] * factor,
                            resolve_gpu(o.gpu), o.method)
        assert o.tokens_per_s == pytest.approx(want, rel=1e-3) and (o.details["mfu_ceiling"] or "") == line
        assert o.details["speedups"]["options"] == (["torch_compile"] if o.gpu == "A100-80GB" else [])
    a100 = next(o for o in fast.options if o.gpu == "A100-80GB")
    assert a100.details["speedups"]["line"].startswith("speed-ups on: torch_compile x1.27 (https://")
    saved = to_planfile(fast, "org/test-7b").train
    best = fast.recommended
    assert saved.torch_compile == ("torch_compile" in best.details["speedups"]["options"])
    assert not saved.liger_kernel


def test_a_lora_plan_on_an_h100_prices_no_speed_option_and_says_why():
    r = plan(method="lora")
    assert all(o.details["speedups"]["factor"] == 1.0 for o in r.options)
    assert not any(n.startswith("speed-ups on:") for n in r.notes)
    assert any(n.startswith("possible, unmeasured for adapter fine-tunes") for n in r.notes)
    saved = to_planfile(r, "org/test-7b").train
    assert not saved.liger_kernel and not saved.torch_compile


def test_no_speedups_keeps_them_off_everywhere():
    r = plan(speedups=False)
    assert all(o.details["speedups"]["options"] == [] for o in r.options)
    assert not any(n.startswith("speed-ups on:") for n in r.notes)
    saved = to_planfile(r, "org/test-7b").train
    assert not saved.liger_kernel and not saved.torch_compile


def test_cli_plan_no_speedups(run_cli):
    args = ("plan", "meta-llama/Llama-2-7b-hf", "--examples", "3000", "--avg-tokens", "400", "--epochs", "3",
            "--seq-len", "1024", "--method", "full", "--gpu", "A100-80GB", "--json")
    docs = {}
    for flag in ((), ("--no-speedups",)):
        code, out, err = run_cli(*args, *flag)
        assert code == 0, err
        docs[flag] = json.loads(out)
    best_on, best_off = docs[()]["recommended"], docs[("--no-speedups",)]["recommended"]
    assert best_on["details"]["speedups"]["options"] == ["torch_compile"]
    assert best_off["details"]["speedups"]["options"] == []
    on, off = best_on["tokens_per_s"], best_off["tokens_per_s"]
    assert best_off["details"]["mfu_ceiling"] is None
    if best_on["details"]["mfu_ceiling"]:  # the factor applied, then the plausibility guard (mfu_ceilings.yaml) held it
        assert off < on < off * COMPILE
    else:
        assert on == pytest.approx(off * COMPILE, rel=1e-3)


@pytest.mark.parametrize("speedups", [True, False])
def test_a_re_priced_option_keeps_the_speed_options_it_was_priced_with(speedups):
    """The budget search and the data audit re-price the recommendation: under --no-speedups they priced the A100
    full fine-tune with torch.compile's x1.27 (price_option's default), so --maximize bought more than the plan
    then showed."""
    from cheaptune.estimate.cost.cost import constants
    from cheaptune.plan.budget import plan_for_budget
    from cheaptune.plan.pricing import repriced

    c = Constraints(speedups=speedups, methods=("full",), gpus=("A100-80GB",))
    r = make_plan("test-7b", SHAPE_7B, 4096, W, c, BOARDS, OFFERS, fake_fit())
    best = r.recommended
    assert best.details["speedups"]["options"] == (["torch_compile"] if speedups else [])
    again = repriced(best, W, SHAPE_7B, constants())
    assert (again.tokens_per_s, again.total) == (best.tokens_per_s, best.total)

    def run(cc, ww):
        return make_plan("test-7b", SHAPE_7B, 4096, ww, cc, BOARDS, OFFERS, fake_fit())

    bought = plan_for_budget(run, Constraints(speedups=speedups, methods=("full",), gpus=("A100-80GB",),
                                              budget_usd=3 * best.total), W, "epochs", SHAPE_7B)
    top = bought.recommended
    assert top.details["interval"]["total_usd"][2] <= 3 * best.total  # what it bought fits the budget at p90
