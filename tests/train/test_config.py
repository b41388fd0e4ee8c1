"""Config: Axolotl keys, HF aliases, did-you-mean, one-line errors (exit 2), CLI and plan overrides."""

from __future__ import annotations

import pytest
import yaml

from cheaptune.errors import BadInput
from cheaptune.train.config import build, validate


def _write(tmp_path, data) -> str:
    p = tmp_path / "train.yaml"
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(p)


def test_axolotl_keys_and_hf_aliases(tmp_path):
    cfg = build(_write(tmp_path, {
        "base_model": "m", "adapter": "qlora", "lora_r": 8, "lora_target_linear": True,
        "datasets": [{"path": "d.jsonl", "type": "alpaca"}], "per_device_train_batch_size": 4,
        "num_train_epochs": 2, "lr_scheduler_type": "linear", "optim": "adamw_torch", "max_seq_length": 128,
    }))
    assert cfg.method == "qlora" and cfg.lora_r == 8 and cfg.lora_targets == "all-linear"
    assert (cfg.micro_batch_size, cfg.num_epochs, cfg.lr_scheduler, cfg.sequence_len) == (4, 2, "linear", 128)
    assert cfg.datasets[0].type == "alpaca"


@pytest.mark.parametrize(("raw", "method"), [
    ({}, "lora"), ({"adapter": "lora", "load_in_4bit": True}, "qlora"), ({"method": "dora", "adapter": "lora"}, "dora"),
])
def test_method_resolution(raw, method):
    assert validate({"base_model": "m", **raw}).method == method


def test_unknown_key_did_you_mean(tmp_path, run_cli):
    path = _write(tmp_path, {"base_model": "m", "learning_rat": 0.1})
    code, _, err = run_cli("train", path)
    assert code == 2
    assert "unknown key 'learning_rat'" in err and "did you mean learning_rate" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_type_names_field(tmp_path, run_cli):
    code, _, err = run_cli("train", _write(tmp_path, {"base_model": "m", "micro_batch_size": "lots"}))
    assert code == 2 and "micro_batch_size" in err and len(err.strip().splitlines()) == 1


def test_bad_method_and_yaml(tmp_path):
    with pytest.raises(BadInput, match="method"):
        validate({"method": "loraa"})
    with pytest.raises(BadInput, match=r"line \d+ is not valid YAML"):
        build(_write(tmp_path, "a: 1\nb: [unclosed\n"))
    with pytest.raises(BadInput, match="not found"):
        build(tmp_path / "missing.yaml")


def test_cli_flags_override_file(tmp_path):
    path = _write(tmp_path, {"base_model": "m", "lora_r": 8, "max_steps": 100, "per_device_train_batch_size": 2})
    cfg = build(path, overrides={"lora_r": 32, "max_steps": None, "micro_batch_size": 4})
    assert (cfg.lora_r, cfg.max_steps, cfg.micro_batch_size) == (32, 100, 4)


def test_plan_supplies_method_batch_and_price(tmp_path):
    from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, TrainSettings, save

    plan = PlanFile(
        created="2026-11-30T00:00:00", cheaptune_version="0.1.0", model="some/model", dataset="d.jsonl",
        train=TrainSettings(method="qlora", micro_batch=4, grad_accum=8, grad_ckpt=True, seq_len=1024,
                            precision="bf16-true", optimizer="paged-adamw-8bit", checkpoint_minutes=12.5),
        offer=Offer(provider="x", gpu="A100-80GB", spot=True, kind="spot", price_per_hour=1.5, billing_unit_s=60),
        prediction=Prediction(peak_vram_bytes=10**10, gpu_memory_bytes=8 * 10**10, tokens=10**6, tokens_per_s=1000,
                              hours=0.3, cost=CostBreakdown(compute=0.45, total=0.5)),
        budget_usd=2.0,
    )
    save(plan, tmp_path / "plan.yaml")
    cfg = build(_write(tmp_path, {"base_model": "mine", "micro_batch_size": 1}), tmp_path / "plan.yaml",
                overrides={"gradient_accumulation_steps": 2})
    assert cfg.base_model == "mine"  # the config's model wins; the plan fills gaps only
    assert cfg.datasets[0].path == "d.jsonl"
    # settings the config file or a flag gives win over the plan, and are recorded for the warning
    assert (cfg.method, cfg.micro_batch_size, cfg.gradient_accumulation_steps) == ("qlora", 1, 2)
    assert cfg._plan_overrides == {"micro_batch_size": (4, 1), "gradient_accumulation_steps": (8, 2)}
    # the precision the plan was sized at, unchanged (not turned into a -mixed one), and the quantization
    assert cfg.gradient_checkpointing and cfg.precision == "bf16-true" and cfg.optimizer == "paged_adamw_8bit"
    assert (cfg.quant, cfg.sequence_len, cfg.attn) == ("nf4-dq", 1024, "sdpa")
    assert (cfg.price_per_hour, cfg.billing_unit_s, cfg.save_minutes, cfg.budget_usd) == (1.5, 60, 12.5, 2.0)
    assert cfg.predicted_cost_usd == 0.5


def test_missing_dataset_is_bad_input(tiny_model_dir, run_cli, tmp_path):
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "-o", str(tmp_path / "o"))
    assert code == 2 and "no dataset" in err


def test_plan_over_budget_refuses_before_loading_unless_forced(tmp_path, run_cli):
    from cheaptune.errors import Infeasible
    from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, TrainSettings, save
    from cheaptune.train.run import preflight

    plan = PlanFile(
        created="2026-11-30T00:00:00", cheaptune_version="0.1.0", model="some/model", dataset="d.jsonl",
        train=TrainSettings(method="lora", precision="bf16-mixed"), offer=Offer(provider="x", gpu="L4", price_per_hour=0.7),
        prediction=Prediction(peak_vram_bytes=10**9, gpu_memory_bytes=24 * 10**9, tokens=10**6, tokens_per_s=1000,
                              hours=4.0, cost=CostBreakdown(compute=2.8, total=3.0)),
    )
    save(plan, tmp_path / "plan.yaml")
    # the model does not exist: exit 3 proves the check ran before anything loaded
    code, _, err = run_cli("train", "--plan", str(tmp_path / "plan.yaml"), "--budget", "2", "-o", str(tmp_path / "o"))
    assert code == 3 and "$3.00" in err and "--force" in err and len(err.strip().splitlines()) == 1, err
    cfg = build(None, tmp_path / "plan.yaml", {"budget_usd": 2.0})
    with pytest.raises(Infeasible):
        preflight(cfg)
    preflight(cfg, force=True)
    preflight(build(None, tmp_path / "plan.yaml", {"budget_usd": 5.0}))


def _two_gpu_plan(tmp_path, gpus=2, micro=1, accum=8):
    from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, TrainSettings, save

    plan = PlanFile(
        created="2026-11-30T00:00:00", cheaptune_version="0.1.0", model="some/model", dataset="d.jsonl",
        train=TrainSettings(method="lora", precision="bf16-mixed", micro_batch=micro, grad_accum=accum, gpus=gpus,
                            sharding="ddp"),
        offer=Offer(provider="x", gpu="L4", gpu_count=gpus, price_per_hour=1.4),
        prediction=Prediction(peak_vram_bytes=10**9, gpu_memory_bytes=24 * 10**9, tokens=10**6, tokens_per_s=1000,
                              hours=1.0, cost=CostBreakdown(compute=1.4, total=1.5)),
    )
    save(plan, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


@pytest.mark.parametrize(("gpus", "accum", "run_on", "want", "nearest"),
                         [(2, 8, 1, 16, False), (1, 8, 2, 4, False), (3, 1, 2, 2, True), (2, 3, 4, 2, True)])
def test_plan_on_another_gpu_count_keeps_the_effective_batch(tmp_path, gpus, accum, run_on, want, nearest):
    cfg = build(None, _two_gpu_plan(tmp_path, gpus, 1, accum), {"gpu_count": run_on})
    assert (cfg.gradient_accumulation_steps, cfg.gpu_count) == (want, run_on)
    assert cfg.guard_fields()["gpu_count"] == run_on  # the registry records the GPUs really used
    [note] = cfg._plan_notes
    assert f"{accum} -> {want}" in note and ("nearest" in note) == nearest
    assert not cfg._plan_overrides  # the plan's own accumulation, rescaled: not a user override


def test_plan_on_its_own_gpu_count_or_an_explicit_accumulation_is_unchanged(tmp_path):
    plan = _two_gpu_plan(tmp_path)
    cfg = build(None, plan, {"gpu_count": 2})
    assert (cfg.gradient_accumulation_steps, cfg._plan_notes) == (8, [])
    cfg = build(None, plan, {"gpu_count": 1, "gradient_accumulation_steps": 4})
    assert (cfg.gradient_accumulation_steps, cfg._plan_notes, cfg.gpu_count) == (4, [], 1)


def test_train_plan_with_fewer_gpus_says_it_keeps_the_batch(tmp_path, run_cli):
    # the model does not exist: the run stops at the model check (exit 2), after the line is said
    code, _, err = run_cli("train", "--plan", str(_two_gpu_plan(tmp_path)), "--gpu-count", "1",
                           "-o", str(tmp_path / "o"))
    assert code == 2
    assert "plan sized for 2 GPU(s), running on 1: gradient accumulation 8 -> 16" in err and "= 16" in err, err


@pytest.mark.parametrize("raw", [{"method": "qlora", "quant": "int8"}, {"adapter": "lora", "load_in_8bit": True},
                                 {"method": "lora", "quant": "nf4"}, {"method": "qlora", "quant": "fp4"}])
def test_quantization_that_is_not_trained_is_refused_in_one_line(raw):
    with pytest.raises(BadInput) as err:
        validate({"base_model": "m", **raw})
    msg = str(err.value)
    assert "\n" not in msg and "{" not in msg  # the rule, not a dump of the whole config
    assert ("int8" in msg) == ("int8" in str(raw) or "load_in_8bit" in str(raw))


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_outside_numpys_range_is_refused(seed):
    """transformers' set_seed seeds numpy, which raised 'Seed must be between 0 and 2**32 - 1' mid-run."""
    with pytest.raises(BadInput, match="seed"):
        validate({"seed": seed})
    assert validate({"seed": 2**32 - 1}).seed == 2**32 - 1


@pytest.mark.parametrize(("key", "value", "says"), [("lr_scheduler", "cosin", "did you mean cosine"),
                                                     ("optimizer", "banana", "OptimizerNames")])
def test_an_optimizer_or_scheduler_transformers_lacks_is_refused_before_loading(key, value, says):
    """TrainingArguments raised a ValueError for these only after the model and data loaded: a traceback."""
    from cheaptune.train.config import check_hf_names

    with pytest.raises(BadInput, match=says) as err:
        check_hf_names(validate({key: value}))
    assert f"{key} {value!r}" in str(err.value) and "\n" not in str(err.value)
    check_hf_names(validate({"lr_scheduler": "constant", "optimizer": "adamw_torch"}))  # the demo config's names
