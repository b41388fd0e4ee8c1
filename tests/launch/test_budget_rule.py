"""One budget rule for `launch` and `train --plan` (train.planmerge.run_budget): --budget wins, else the lower of
the plan's and the config's cap; launch holds the offers to that cap before anything is rented."""

from __future__ import annotations

import pytest
import yaml

from cheaptune.errors import Infeasible
from cheaptune.launch import launcher
from cheaptune.launch.options import LaunchOptions

from .conftest import make_plan, offer


def _prepare(tmp_path, recorder, config_budget=None, flag=None, budget=20.0):
    """A $5 plan with `budget`, a config beside its data with `config_budget`, prepared with launch --budget `flag`."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a"}\n')
    config = tmp_path / "cfg.yaml"
    config.write_text("" if config_budget is None else f"budget_usd: {config_budget}\n")
    plan = make_plan(offer("runpod", "RTX4090", 0.69), dataset=str(data), budget=budget)
    opts = LaunchOptions(config=str(config), checkpoint_dir="/mnt/ckpt", budget=flag)
    return launcher.prepare(plan, opts, recorder, tmp_path / "task.yaml")


def _run_cap(prep) -> str | None:
    args = yaml.safe_load(prep.yaml_path.read_text())["run"].split()
    return args[args.index("--budget") + 1] if "--budget" in args else None


def test_a_config_cap_under_the_plans_is_the_one_the_machine_runs_and_the_staged_plan_says(tmp_path, recorder):
    prep = _prepare(tmp_path, recorder, config_budget=8)
    assert _run_cap(prep) == "8" and prep.plan.budget_usd == 8.0
    staged = yaml.safe_load((prep.staging_dir / "plan.yaml").read_text())
    assert staged["budget_usd"] == 8.0  # what train --plan reads there agrees with the --budget it is handed


def test_a_config_cap_under_the_predicted_cost_is_refused_before_anything_is_written(tmp_path, recorder):
    """train on the machine would refuse the $5 plan under a $1 cap (exit 3) after the boot was paid for."""
    with pytest.raises(Infeasible, match=r"predicts \$5\.00, over its budget \$1\.00"):
        _prepare(tmp_path, recorder, config_budget=1)
    assert not (tmp_path / "task.yaml").exists() and not recorder.calls


def test_launch_budget_wins_over_the_configs_cap_as_trains_flag_does(tmp_path, recorder):
    """`launch --budget` raises a run stopped at its cap (launch.watch says so), even where the config has one."""
    assert _run_cap(_prepare(tmp_path, recorder, config_budget=10, flag=30.0)) == "30"


@pytest.mark.parametrize(("config_budget", "cap"), [(9, "9"), (None, None)])
def test_without_a_plan_budget_the_configs_cap_or_none(tmp_path, recorder, config_budget, cap):
    assert _run_cap(_prepare(tmp_path, recorder, config_budget=config_budget, budget=None)) == cap


@pytest.mark.parametrize(("flags", "cap"), [((), "6"), (("--budget", "30"), "30")])
def test_the_launch_command_runs_the_rules_cap(tmp_path, plan_file, run_cli, flags, cap):
    """Through the CLI: the $20 plan and a $6 config cap run at $6; `launch --budget 30` wins over both."""
    config = tmp_path / "cfg.yaml"
    config.write_text("budget_usd: 6\n")
    out = tmp_path / "t.yaml"
    code, _, err = run_cli("launch", str(plan_file), "--dry-run", "--config", str(config), "--out", str(out), *flags)
    assert code == 0, err
    args = yaml.safe_load(out.read_text())["run"].split()
    assert args[args.index("--budget") + 1] == cap


def test_the_launch_command_refuses_a_config_cap_under_the_prediction_with_exit_3(tmp_path, plan_file, run_cli):
    config = tmp_path / "cfg.yaml"
    config.write_text("budget_usd: 2\n")  # the plan predicts $3.00
    out = tmp_path / "t.yaml"
    code, _, err = run_cli("launch", str(plan_file), "--dry-run", "--config", str(config), "--out", str(out))
    assert code == 3 and "over its budget $2.00" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
