"""`train --plan` on another model or device: said, billed at what it runs on; the end of a run said readably."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cheaptune.estimate.settings import for_gpu
from cheaptune.plan import planfile
from cheaptune.train.config import build


@pytest.fixture
def h100_plan(tmp_path):
    """A Llama-2-7B LoRA plan on an H100 at $2.49/h with a $5 budget (the figures are the test's own)."""
    plan = planfile.PlanFile(
        created="2026-11-30T00:00:00Z", cheaptune_version="0", model="meta-llama/Llama-2-7b-hf",
        train=for_gpu("lora", True, micro_batch=1, seq_len=64), budget_usd=5.0,
        offer=planfile.Offer(provider="x", gpu="H100", price_per_hour=2.49),
        prediction=planfile.Prediction(peak_vram_bytes=20 << 30, gpu_memory_bytes=80 << 30, tokens=1000,
                                       tokens_per_s=1000.0, hours=0.5, cost=planfile.CostBreakdown(compute=1.3, total=1.3)))
    path = tmp_path / "plan.yaml"
    planfile.save(plan, path)
    return path


def test_a_cpu_run_of_an_h100_plan_is_not_billed_at_the_h100_price(h100_plan, tmp_path):
    from cheaptune.train.billing import bill_where_it_runs  # here: the other tests need none of it

    cfg = build(None, h100_plan, {"output_dir": str(tmp_path / "o"), "datasets": [{"path": "x"}]})
    assert cfg.price_per_hour == 2.49
    on_cpu, note = bill_where_it_runs(cfg, None)
    assert on_cpu.price_per_hour is None and on_cpu.predicted_cost_usd is None
    assert "H100 at $2.49/h" in note and "on the CPU" in note and "--price-per-hour" in note
    assert on_cpu.budget_usd is None and "the plan's $5.00 budget does not apply" in note  # sized at the H100's price
    assert bill_where_it_runs(cfg, "H100") == (cfg, None)  # on the plan's GPU: the plan's price
    other, note = bill_where_it_runs(cfg, "A10G")
    assert other.price_per_hour is None and "on A10G" in note


def test_a_cpu_train_of_an_h100_plan_records_no_h100_price(h100_plan, tmp_path, run_cli, tiny_model_dir, chat_file):
    """The whole command, as the user ran it: before the fix the registry billed this CPU run at $2.49/h with the
    plan's $5 budget (checked on baf092f's parent); one training step, on the tiny model."""
    import json

    code, _, err = run_cli("train", "--plan", str(h100_plan), "--model", str(tiny_model_dir), "--data", str(chat_file),
                           "-o", str(tmp_path / "o"), "--device", "cpu", "--max-steps", "1")
    assert code == 0, err
    said = err
    code, out, _ = run_cli("runs", "--json")
    (run,) = json.loads(out)
    assert (run["price_per_hour"], run["budget_usd"], run["cost_actual_usd"]) == (None, None, None)
    assert "H100 at $2.49/h" in said and "on the CPU" in said


def test_a_plan_for_the_cpu_is_billed_at_its_own_price_on_the_cpu(h100_plan, tmp_path):
    from cheaptune.train.billing import bill_where_it_runs  # here: the other tests need none of it

    raw = planfile.load(h100_plan).model_dump(mode="json")
    raw["offer"] = {**raw["offer"], "gpu": "CPU", "price_per_hour": 0.05}
    cpu_plan = tmp_path / "cpu-plan.yaml"
    planfile.save(planfile.PlanFile.model_validate(raw), cpu_plan)
    cfg = build(None, cpu_plan, {"output_dir": str(tmp_path / "o")})
    assert bill_where_it_runs(cfg, None) == (cfg, None) and cfg.price_per_hour == 0.05
    assert bill_where_it_runs(cfg, "H100")[0].price_per_hour is None  # a CPU plan run on a GPU is not its price


def test_a_config_files_budget_and_price_win_over_the_plans(h100_plan, tmp_path):
    """As its settings do: a $3 budget in the file is not raised to the plan's $5 (nor its price replaced)."""
    (tmp_path / "c.yaml").write_text("budget_usd: 3\nprice_per_hour: 0.5\n")
    cfg = build(tmp_path / "c.yaml", h100_plan, {"output_dir": str(tmp_path / "o")})
    assert (cfg.budget_usd, cfg.price_per_hour) == (3.0, 0.5)
    assert not cfg._plan_priced and not cfg._plan_budgeted  # the user's own: kept off the plan's GPU too
    assert build(tmp_path / "c.yaml", h100_plan, {"budget_usd": 4.0}).budget_usd == 4.0  # a flag wins over both
    (tmp_path / "c.yaml").write_text("budget_usd:\nprice_per_hour:\n")  # left empty: the plan's
    assert (build(tmp_path / "c.yaml", h100_plan, {}).budget_usd, build(tmp_path / "c.yaml", h100_plan, {}).price_per_hour) \
        == (5.0, 2.49)


def test_a_price_of_the_users_own_is_kept_off_the_plans_gpu(h100_plan, tmp_path):
    from cheaptune.train.billing import bill_where_it_runs  # here: the other tests need none of it

    cfg = build(None, h100_plan, {"output_dir": str(tmp_path / "o"), "price_per_hour": 0.3})
    assert bill_where_it_runs(cfg, None) == (cfg, None)
    own_budget = build(None, h100_plan, {"output_dir": str(tmp_path / "o"), "budget_usd": 2.0})
    kept, _ = bill_where_it_runs(own_budget, None)
    assert kept.price_per_hour is None and kept.budget_usd == 2.0  # then refused: a budget needs a price


def test_another_model_than_the_plans_is_warned(h100_plan, tmp_path, capsys, tiny_model_dir):
    from cheaptune.train.plancheck import check_plan_overrides

    cfg = build(None, h100_plan, {"output_dir": str(tmp_path / "o"), "base_model": str(tiny_model_dir)})
    check_plan_overrides(cfg, h100_plan)
    err = capsys.readouterr().err
    assert f"model {tiny_model_dir} is not plan {h100_plan}'s meta-llama/Llama-2-7b-hf" in err
    same = build(None, h100_plan, {"output_dir": str(tmp_path / "o"), "base_model": "META-LLAMA/Llama-2-7b-hf"})
    check_plan_overrides(same, h100_plan)
    assert "is not plan" not in capsys.readouterr().err


def test_the_demo_configs_optimizer_can_be_estimated(tmp_path):
    from cheaptune.train.settings import from_config

    cfg = build(None, None, {"base_model": "x/y", "optimizer": "adamw_torch", "output_dir": str(tmp_path)})
    assert from_config(cfg, "fp32").optimizer == "adamw"


def test_final_loss_reads_as_a_number_and_falls_back_to_the_runs_mean(tmp_path):
    from cheaptune.train.outputs import write_summary

    cfg = build(None, None, {"base_model": "x/y", "output_dir": str(tmp_path)})
    state = SimpleNamespace(global_step=2, max_steps=2, num_input_tokens_seen=10,
                            log_history=[{"step": 2, "train_loss": 1.25, "train_runtime": 1.0}])  # no per-step loss
    s = write_summary(cfg, state, seconds=1.0, tokens_segment=10, final_eval_loss=None, precision="fp32", extra={})
    assert s["final_train_loss"] == 1.25  # was None, printed as "final loss None"
    from cheaptune.train.outputs import loss_text

    assert loss_text(0.006672698073089123) == "0.006673" and loss_text(None) == "not logged"


def test_the_last_step_is_printed_once():
    import io

    from cheaptune.train.callbacks import ProgressCallback

    out = io.StringIO()
    cb = ProgressCallback(stream=out)
    state = SimpleNamespace(global_step=0, max_steps=12, num_input_tokens_seen=0)
    cb.on_train_begin(None, state, None)
    state.global_step, state.num_input_tokens_seen = 12, 100
    cb.on_log(None, state, None, logs={"loss": 1.0})
    cb.on_log(None, state, None, logs={"train_runtime": 3.0, "train_loss": 1.1})  # the Trainer's closing summary
    assert out.getvalue().count("step 12/12") == 1
