"""`make demo` wiring: plan and train through the CLI, then the before/after report (tiny model, 2 steps)."""

from __future__ import annotations

import json

from cheaptune.demo.run import main


def test_demo_runs_plan_then_train(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["--model", str(tiny_model_dir), "--max-steps", "4", "--output-dir", str(out)])
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, text
    assert "$ cheaptune plan" in text and "$ cheaptune train" in text
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["steps"] == 4 and summary["method"] == "lora"
    assert "before:" in text and "after:" in text and "loss:" in text
    assert "CPU rate measured here" in text and "predicted vs measured: tokens/s" in text
    assert " predicted (" in captured.err and "no prediction" not in captured.err  # the probe compares too
    assert len([h for h in summary["loss_history"] if "loss" in h]) == 2  # logged every 2 steps
    assert (out / "adapter_model.safetensors").is_file()
