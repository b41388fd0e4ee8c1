"""A config's relative dataset paths are read from the config file's folder by every command that reads a
config (train, doctor, plan --config: train.config.read_yaml -> util.yamlfile.with_config_paths), so a
command run from another folder finds them; a named file found nowhere is said as such (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

from cheaptune.plan.config_run import read_run
from cheaptune.train.config import read_yaml

ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _config(folder: Path, data: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "cfg.yaml"
    cfg.write_text(f"base_model: HuggingFaceTB/SmolLM2-135M-Instruct\nadapter: lora\ndatasets:\n  - path: {data}\n"
                   "    type: messages\nsequence_len: 256\nmicro_batch_size: 2\n")
    return cfg


def test_relative_dataset_is_read_from_the_config_folder(tmp_path, monkeypatch):
    cfg = _config(tmp_path / "proj", "train.jsonl")
    (tmp_path / "proj" / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    monkeypatch.chdir(tmp_path)  # another folder than the config's
    assert read_yaml("proj/cfg.yaml")["datasets"][0]["path"] == str(Path("proj") / "train.jsonl")
    run = read_run(Path("proj/cfg.yaml"), own=True)
    assert run.dataset == str((tmp_path / "proj" / "train.jsonl").resolve()) and run.dataset_missing is None
    assert cfg.exists()


def test_relative_eval_data_is_read_from_the_config_folder(tmp_path, monkeypatch):
    """eval_data is an input like datasets (train --eval-after reads it): from the config's folder too."""
    cfg = _config(tmp_path / "proj", "train.jsonl")
    cfg.write_text(cfg.read_text() + "eval_data: held.jsonl\n")
    (tmp_path / "proj" / "held.jsonl").write_text(json.dumps(ROW) + "\n")
    monkeypatch.chdir(tmp_path)
    assert read_yaml("proj/cfg.yaml")["eval_data"] == str(Path("proj") / "held.jsonl")


def test_a_hub_dataset_and_a_working_folder_path_stay_as_written(tmp_path, monkeypatch):
    _config(tmp_path / "proj", "HuggingFaceH4/no_robots")
    monkeypatch.chdir(tmp_path)
    assert read_yaml("proj/cfg.yaml")["datasets"][0]["path"] == "HuggingFaceH4/no_robots"
    assert read_run(Path("proj/cfg.yaml"), own=True).dataset_missing is None  # a hub id is not a missing file
    (tmp_path / "here.jsonl").write_text(json.dumps(ROW) + "\n")
    _config(tmp_path / "proj", "here.jsonl")
    assert read_yaml("proj/cfg.yaml")["datasets"][0]["path"] == "here.jsonl"  # from the working folder, as before


def test_plan_says_the_config_s_dataset_was_not_found(run_cli, tmp_path, monkeypatch):
    _config(tmp_path / "proj", "examples/demo/train.jsonl")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("plan", "--config", "proj/cfg.yaml")
    assert code == 2 and out == ""
    assert "the config's dataset examples/demo/train.jsonl was not found (looked in proj" in err
    assert "say how much data" not in err
