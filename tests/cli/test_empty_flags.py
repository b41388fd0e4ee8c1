"""A text flag given as '' is refused in one line (exit 2), never read as 'not given': `launch --gpu ''` kept the
plan's GPU and wrote the task with exit 0, `train --model ''` said 'no base model' after creating the output
folder, and `estimate --model ''` read the current folder as the model."""

from __future__ import annotations

import pytest

from cheaptune.plan.planfile import save
from tests.launch.conftest import make_plan, offer


@pytest.fixture
def plan(tmp_path):
    path = tmp_path / "plan.yaml"
    save(make_plan(offer("vast", "RTX4090", 0.5)), path)
    return path


@pytest.mark.parametrize("flag", ["--gpu", "--provider", "--region", "--name", "--model", "--data"])
def test_launch_refuses_an_empty_override_and_writes_no_task(run_cli, plan, tmp_path, flag):
    out_yaml = tmp_path / "task.yaml"
    code, out, err = run_cli("launch", str(plan), "--dry-run", "--out", str(out_yaml), flag, " ")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and f"{flag} is empty" in lines[0], err
    assert not out_yaml.exists()


def test_train_and_estimate_refuse_an_empty_model_before_writing_anything(run_cli, plan, tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")  # a folder estimate --model '' must not read as the model
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "out"
    for args in (("train", "--plan", str(plan), "--model", "", "-o", str(out_dir)),
                 ("estimate", "--model", "", "--method", "lora", "--micro-batch", "1", "--seq-len", "64")):
        code, out, err = run_cli(*args)
        assert code == 2 and out == "" and err.strip() == "error: --model is empty; give a value or leave the flag out"
    assert not out_dir.exists()
