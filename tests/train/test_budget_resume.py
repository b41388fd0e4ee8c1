"""The budget cap across resumed runs: a resumed run starts from what earlier runs of the same output billed
(the registry, or the spend ledger beside the checkpoints on a machine whose registry is empty), and one that
cannot afford another step with its checkpoint does not start, so the total stays within one step's cost."""

from __future__ import annotations

import json

from cheaptune.runs import ledger
from cheaptune.runs.meter import usd
from cheaptune.runs.registry import Registry
from cheaptune.train import checkpoints as ck

PRICE = 36.0  # $/h: one cent a second, billed per second (the default unit)
BUDGET = 0.02  # two billed seconds of training


def _args(model, data, out):
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--max-steps", "2000",
            "--save-steps", "1000", "--seq-len", "64", "--micro-batch", "1", "--device", "cpu", "--probe-steps", "0",
            "--price-per-hour", f"{PRICE:g}", "--budget", f"{BUDGET:g}", "--force"]


def _run_id(out):
    return json.loads((out / "cheaptune_run.json").read_text())["run_id"]


def test_resumed_runs_stay_within_one_step_of_the_cap(tiny_model_dir, chat_file, tmp_path, run_cli, monkeypatch):
    out = tmp_path / "out"
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out))
    assert code == 10, err
    first = Registry().get_run(_run_id(out))
    spent, steps = first["cost_actual_usd"], ck.step_of(ck.list_checkpoints(out)[-1])
    assert f"({usd(spent)} of {usd(BUDGET)} spent)" in err  # the exact figure the registry holds
    entry = next(iter(json.loads((out / ledger.FILE).read_text()).values()))
    assert entry["usd"] == spent and entry["step_s"] > 0
    # A step is billed in whole seconds: one step's cost is at least one billing unit.
    one_step = PRICE / 3600 * max(1.0, entry["step_s"])
    assert spent <= BUDGET + one_step
    code, report, _ = run_cli("report", first["id"])
    assert code == 0 and f"cost: {usd(spent)} actual" in report  # four decimals under $1, never rounded to the cap

    # The same command again: it resumes, finds the budget spent, and does not take a step.
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out))
    assert code == 10 and "not started" in err and f"billed {usd(spent)}" in err, err
    again = Registry().get_run(first["id"])
    assert again["cost_actual_usd"] == spent and again["status"] == "budget-stopped"
    assert ck.step_of(ck.list_checkpoints(out)[-1]) == steps

    # A fresh machine (empty registry), the same checkpoint folder: the ledger carries the spend.
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "other-machine"))
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out))
    assert code == 10 and "not started" in err, err
    assert ck.step_of(ck.list_checkpoints(out)[-1]) == steps
    total = sum(e["usd"] for e in json.loads((out / ledger.FILE).read_text()).values())
    assert total == spent <= BUDGET + one_step
