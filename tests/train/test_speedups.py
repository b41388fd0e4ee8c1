"""Speed options (Liger, torch.compile, bitsandbytes optimizers): refused in one line where they cannot run,
carried from the plan's settings to the trainer's arguments, and priced by the time model with sources."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate.settings import TrainSettings
from cheaptune.estimate.time.speedups import speedup, table
from cheaptune.train import speedups
from cheaptune.train.config import validate
from cheaptune.train.methods import Precision, load_model
from cheaptune.train.settings import config_fields, from_config
from tests.helpers import differences


def cfg(**kw):
    return validate({"base_model": "/nonexistent/model", **kw})


def test_options_default_off_and_validate():
    c = cfg()
    assert c.liger_kernel is False and c.torch_compile is False and speedups.asked(c) == []
    with pytest.raises(BadInput, match="liger_kernel"):
        cfg(liger_kernel="sometimes")


def test_every_problem_in_one_line_on_cpu():
    with pytest.raises(BadInput) as err:
        speedups.check(cfg(liger_kernel=True, torch_compile=True, optimizer="paged_adamw_8bit"), "cpu")
    line = str(err.value)
    assert "\n" not in line
    for part in ("liger_kernel: true needs a CUDA GPU", "torch_compile: true needs a CUDA GPU",
                 "optimizer paged_adamw_8bit needs a CUDA GPU"):
        assert part in line


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(speedups, "_installed", lambda module: module != "liger_kernel")
    with pytest.raises(BadInput, match=r"needs the liger-kernel package \(pip install 'cheaptune\[liger\]'\)"):
        speedups.check(cfg(liger_kernel=True, torch_compile=True), "cuda")
    speedups.check(cfg(torch_compile=True, optimizer="adamw_bnb_8bit"), "cuda")  # installed: accepted


def test_refused_before_the_model_loads():
    # the base model path does not exist: the option's line comes first, not a load error
    with pytest.raises(BadInput, match="liger_kernel: true needs a CUDA GPU"):
        load_model(cfg(liger_kernel=True), Precision("cpu", "fp32"))


def test_plan_settings_reach_the_trainer_arguments():
    from cheaptune.train.trainer import sft_config

    s = TrainSettings(method="lora", precision="bf16-mixed", liger_kernel=True, torch_compile=True)
    c = cfg(**{k: v for k, v in config_fields(s).items() if v is not None}, output_dir="/tmp/ct_speedups")
    assert c.liger_kernel and c.torch_compile
    assert differences(from_config(c, "bf16-mixed"), s) == {}
    args = sft_config(c.model_copy(update={"liger_kernel": False}), Precision("cpu", "fp32"), "text", False)
    assert args.torch_compile is True and args.use_liger_kernel is False


def test_time_model_factors_carry_sources():
    none = speedup()
    assert none.factor == 1.0 and none.options == ()
    both = speedup(liger_kernel=True, torch_compile=True)
    # both fuse the same elementwise ops (one `overlaps` group): the better factor counts, not the product
    assert both.factor == pytest.approx(max(table()["liger_kernel"]["factor"], table()["torch_compile"]["factor"]))
    with_8bit = speedup(liger_kernel=True, torch_compile=True, optimizer="adamw-8bit")
    assert with_8bit.factor == pytest.approx(both.factor * table()["adamw-8bit"]["factor"])  # other groups multiply
    assert len(both.sources) == 2 and all("https://" in src for src in both.sources)
    assert len(both.not_simulated) == 2  # neither kernel's memory saving is simulated: the estimate errs high
    eight = TrainSettings(method="lora", precision="bf16-mixed", optimizer="adamw-8bit").speedup
    assert eight.options == ("adamw-8bit",) and eight.factor < 1 and eight.not_simulated == ()


def test_a_plans_own_speed_options_turn_off_where_they_cannot_run(tmp_path, monkeypatch):
    """A GPU plan's Liger/compile (the planner's choice) are turned off on a CPU with one line, so the saved
    plan still trains here; the same options set by the user's config stay on and are refused by check()."""
    from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, save
    from cheaptune.plan.planfile import TrainSettings as PlanSettings
    from cheaptune.train.config import build

    plan = PlanFile(
        created="2026-12-01T00:00:00", cheaptune_version="0.1.0", model="some/model", dataset="d.jsonl",
        train=PlanSettings(method="lora", precision="bf16-mixed", liger_kernel=True, torch_compile=True),
        offer=Offer(provider="x", gpu="A100-80GB", gpu_count=1, price_per_hour=1.4),
        prediction=Prediction(peak_vram_bytes=10**9, gpu_memory_bytes=80 * 10**9, tokens=10**6, tokens_per_s=1000,
                              hours=1.0, cost=CostBreakdown(compute=1.4, total=1.5)),
    )
    save(plan, tmp_path / "plan.yaml")
    planned = build(None, tmp_path / "plan.yaml", {})
    on_cpu, line = speedups.fit_planned(planned, "cpu")
    assert not on_cpu.liger_kernel and not on_cpu.torch_compile and speedups.asked(on_cpu) == []
    assert "liger_kernel and torch_compile turned off: no CUDA GPU" in line
    monkeypatch.setattr(speedups, "_installed", lambda module: True)
    assert speedups.fit_planned(planned, "cuda") == (planned, None)  # a GPU with both installed: kept
    monkeypatch.setattr(speedups, "_installed", lambda module: module != "liger_kernel")
    gpu, line = speedups.fit_planned(planned, "cuda")
    assert not gpu.liger_kernel and gpu.torch_compile and "not installed" in line
    config = tmp_path / "own.yaml"
    config.write_text("base_model: some/model\nliger_kernel: true\n")
    mine = build(config, tmp_path / "plan.yaml", {})
    assert speedups.fit_planned(mine, "cpu")[0].liger_kernel  # the user's own setting is not dropped
    with pytest.raises(BadInput, match="liger_kernel: true needs a CUDA GPU"):
        speedups.check(speedups.fit_planned(mine, "cpu")[0], "cpu")


def test_fsdp_checkpointing_is_fsdps_own_not_also_the_trainers(monkeypatch):
    # transformers raises when FSDP's activation checkpointing and the training argument are both on; the
    # accelerate config we write for FSDP (train/distributed.py) turns FSDP's on, so the argument must be off there
    from cheaptune.train.distributed import Nodes, accelerate_config
    from cheaptune.train.trainer import trainer_args

    c = cfg(gradient_checkpointing=True, output_dir="/tmp/ct_fsdp_ckpt")
    prec = Precision("cpu", "fp32")
    assert trainer_args(c, prec, False)["gradient_checkpointing"] is True
    fsdp = accelerate_config("fsdp", Nodes(gpus_per_node=2), grad_ckpt=True)
    assert fsdp["fsdp_config"]["fsdp_activation_checkpointing"] is True
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING", "true")
    assert trainer_args(c, prec, False)["gradient_checkpointing"] is False
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING", "false")
    assert trainer_args(c, prec, False)["gradient_checkpointing"] is True
