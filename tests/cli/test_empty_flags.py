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


# pathlib reads '' as '.', so before the path parser `plan --save ''` said '. is a folder' and `plan --data ''`
# looked for a dataset in the current folder.
@pytest.mark.parametrize("args, name", [
    (("plan", "llama-2-7b", "--tokens", "1e6", "--save", ""), "'--save'"),
    (("plan", "llama-2-7b", "--data", " "), "'--data'"),
    (("plan", "llama-2-7b", "--config", ""), "'--config'"),
    (("plan", "llama-2-7b", ""), "'DATA'"),
    (("train", ""), "'CONFIG'"),
    (("train", "--plan", ""), "'--plan'"),
    (("launch", ""), "'PLAN'"),
    (("doctor", ""), "'CONFIG'"),
    (("calibrate", "--export", ""), "'--export'"),
    (("ui", "--registry", ""), "'--registry'"),
])
def test_an_empty_path_is_refused_by_name_not_read_as_this_folder(run_cli, tmp_path, monkeypatch, args, name):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert f"Invalid value for {name}: is empty; give a path" in lines[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("args, flag", [
    (("estimate", "--config", ""), "--config"),
    (("eval", "run", "--data", ""), "--data"),
    (("train", "--model", "m", "--output-dir", ""), "--output-dir"),
    (("train", "--model", "m", "--resume", " "), "--resume"),
])
def test_an_empty_text_path_flag_is_refused_not_ignored(run_cli, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*args)
    assert code == 2 and out == "" and err.strip().endswith(f"{flag} is empty; give a value or leave the flag out"), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, flag", [
    (("train", "--model", "m", "--data", "a.jsonl", "--data", ""), "--data"),  # an empty one among repeats
    (("train", "--model", "m", "--objective", "grpo", "--data", "a.jsonl", "--reward", " "), "--reward"),
    (("launch", "plan.yaml", "--secret", ""), "--secret"),
])
def test_a_repeatable_flag_refuses_an_empty_value(run_cli, tmp_path, monkeypatch, args, flag):
    """`train --data ''` read '' as this folder's dataset; an empty --reward or --secret named nothing."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*args)
    assert code == 2 and out == "" and err.strip() == f"error: {flag} is empty; give a value or leave the flag out"
    assert list(tmp_path.iterdir()) == []
