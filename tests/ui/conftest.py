"""A registry with runs in the states the dashboard shows, and plan files of both forms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheaptune.plan import render
from cheaptune.plan.planfile import save
from cheaptune.plan.save import to_planfile
from cheaptune.runs.registry import Registry
from tests.plan.test_render_save import result

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def registry(tmp_path) -> Path:
    """runs.sqlite with a finished run (points, probe, alert, eval) and a running one with a hostile name."""
    path = tmp_path / "runs.sqlite"
    reg = Registry(path)
    out = tmp_path / "out-a"
    out.mkdir()
    a = reg.start_run(name="lora-a", model="tiny", method="lora", gpu="A100-80GB", provider="runpod",
                      budget_usd=5.0, cost_predicted_usd=2.0, peak_mem_predicted=2 * 2**30, output_dir=str(out))
    for step in (1, 2, 3):
        a.record_point(step, loss=2.0 / step, elapsed_s=60.0 * step, cost_usd=0.25 * step)
    a.event("probe", {"predicted_peak": 2 * 2**30, "device_used": int(2.2 * 2**30), "tokens_per_s": 900.0,
                      "predicted_tokens_per_s": 1000.0})
    a.event("budget_50", {"message": "half the budget spent"})
    a.event("eval", {"tuned": {"exact_match": 0.8}, "base": {"exact_match": 0.1}})
    a.add_segment_cost(0.75)
    a.finish("finished", eval_loss=0.5)
    b = reg.start_run(name=HOSTILE, model="tiny", method="qlora", gpu="L4", provider="vast",
                      output_dir=str(tmp_path / "gone"))
    b.event("oom_fallback", {"message": HOSTILE})
    return path


@pytest.fixture
def plans(tmp_path) -> Path:
    """A folder with a saved plan (YAML), a `plan --json` document, a broken plan and an unrelated config."""
    folder = tmp_path / "plans"
    folder.mkdir()
    r = result()
    save(to_planfile(r, "test-7b"), folder / "plan.yaml")
    (folder / "plan.json").write_text(json.dumps(render.to_json(r)))
    (folder / "broken.json").write_text('{"options": [], "workload": {}}')
    (folder / "config.yaml").write_text("base_model: x\n")
    return folder
