"""`make demo` wiring: plan, a plan for this CPU, `train --plan` through the CLI, then the report (tiny model)."""

from __future__ import annotations

import json
import re

from cheaptune.demo.run import main


def test_demo_runs_plan_then_train(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["--model", str(tiny_model_dir), "--max-steps", "4", "--output-dir", str(out)])
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, text
    assert "$ cheaptune plan" in text and f"--plan {tmp_path / 'out-plan.yaml'}" in text  # trained from its plan
    from cheaptune.plan.planfile import load

    plan = load(tmp_path / "out-plan.yaml")
    assert plan.offer.gpu == "CPU" and plan.prediction.peak_vram_bytes > 0  # the estimator's simulated peak
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["steps"] == 4 and summary["method"] == "lora"
    assert "before:" in text and "after:" in text and "loss:" in text
    assert "CPU rate measured here" in text and "plan for this CPU" in text
    assert re.search(rf"predicted vs measured: tokens/s {plan.prediction.tokens_per_s:.0f} vs \d+ .*the probe's 3 "
                     r"steps\), seconds [\d.]+ vs [\d.]+ ", text)
    assert f"vs {plan.prediction.tokens_per_s:.0f} predicted (" in captured.err  # the probe held it against the plan
    assert "no prediction" not in captured.err and "replace plan" not in captured.err and "not the plan's" not in captured.err
    assert len([h for h in summary["loss_history"] if "loss" in h]) == 2  # logged every 2 steps
    assert (out / "adapter_model.safetensors").is_file()
