"""A config's `versions:` and `trainer:` keys (plan.config_run.config_pins): the same inputs as --versions and
--trainer, which win per library; checked with one line naming the key; `train` warns when the run's installed
version differs from a pin."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

QLORA = ("--method", "qlora", "--micro-batch", "2", "--seq-len", "64", "--lora-targets", "qv", "--json")


@pytest.fixture
def model_dir(tmp_path, tiny_cfg):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_cfg.to_dict()))
    return folder


def _config(tmp_path, model_dir, extra: str, name: str = "run.yaml"):
    """A cheaptune config of the QLoRA run above (4-bit layers outside the qv adapters keep their inputs when
    bitsandbytes < 0.43.2 does)."""
    path = tmp_path / name
    path.write_text(f"base_model: {model_dir}\nmethod: qlora\nmicro_batch_size: 2\nsequence_len: 64\n"
                    f"lora_targets: qv\n{extra}")
    return path


def _peak(run_cli, *args) -> dict:
    code, out, err = run_cli("estimate", *args)
    assert code == 0, err
    return json.loads(out)


def test_a_config_pin_gives_the_flag_pins_estimate_and_moves_a_qlora_peak(run_cli, tmp_path, model_dir):
    cfg = _config(tmp_path, model_dir, 'versions: {bitsandbytes: "0.42.0"}\n')
    from_file = _peak(run_cli, "--config", str(cfg), "--json")
    from_flag = _peak(run_cli, "--model", str(model_dir), *QLORA, "--versions", "bitsandbytes==0.42.0")
    default = _peak(run_cli, "--model", str(model_dir), *QLORA)
    assert from_file["details"]["versions"]["mechanisms"]["bnb_keeps_input"] is True
    assert default["details"]["versions"]["mechanisms"]["bnb_keeps_input"] is False  # the installed 0.50.2
    assert from_file["peak_allocated_bytes"] == from_flag["peak_allocated_bytes"]
    assert from_file["peak_allocated_bytes"] > default["peak_allocated_bytes"]  # the k, o and MLP inputs kept


def test_a_flag_wins_over_the_config_and_the_estimate_says_where_each_version_came_from(run_cli, tmp_path, model_dir):
    trl = metadata.version("trl")
    cfg = _config(tmp_path, model_dir, f'versions: {{bitsandbytes: "0.42.0", trl: "{trl}"}}\n')
    code, out, err = run_cli("estimate", "--config", str(cfg), "--versions", "bitsandbytes==0.50.2")
    assert code == 0, err
    line = " ".join(out.split())
    assert "bitsandbytes==0.50.2 (flag)" in line and f"trl=={trl} (config)" in line
    assert "(installed)" in line and "version-dependent terms on: none" in line  # torch, peft, transformers
    assert "bitsandbytes==0.42.0" not in line


@pytest.mark.parametrize(("extra", "says"), [
    ("versions: {peft: 0.10}\n", "versions.peft: 0.1 is not a version string; write it in quotes"),
    ('versions: {numpy: "1.0"}\n', "versions.numpy: no memory mechanism depends on 'numpy'"),
    ('versions: {peft: "latest"}\n', "versions.peft: 'latest' is not a version"),
    ("versions: bitsandbytes==0.42.0\n", "versions must map each library to its version"),
    ("trainer: nope\n", "trainer 'nope' is not a trainer profile; use one of cheaptune, hf"),
    ("trainer: litgpt==latest\n", "trainer 'litgpt==latest': 'latest' is not a version"),
    ("trainer: cheaptune==1.0\n", "the cheaptune profile is what cheaptune runs now; drop ==version"),
])
@pytest.mark.parametrize("command", ["estimate", "plan", "train"])
def test_a_bad_version_key_is_one_line_and_exit_2(run_cli, tmp_path, model_dir, extra, says, command):
    cfg = _config(tmp_path, model_dir, extra)
    args = {"estimate": ("--config", str(cfg)), "plan": ("--config", str(cfg), "--tokens", "1000"),
            "train": (str(cfg), "--device", "cpu")}[command]
    code, out, err = run_cli(command, *args)
    assert code == 2 and says in err and str(cfg) in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_another_trainers_config_takes_the_keys_too_and_its_trainer_release_picks_its_terms(tmp_path):
    """An Axolotl config with cheaptune's keys: its reader skips them (no 'unknown axolotl key'), and
    trainer: axolotl==0.2.0 is a release before Axolotl cast peft's fp32 upcasts back (versions.yaml kbit_prep_kept)."""
    from cheaptune.cli.estimate import request_from_options
    from cheaptune.estimate.memory.mechanisms import mechanism

    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: HuggingFaceTB/SmolLM2-135M\nadapter: qlora\nload_in_4bit: true\nsequence_len: 64\n"
                   "micro_batch_size: 1\nlora_r: 8\nlora_alpha: 16\ntrainer: axolotl==0.2.0\n"
                   'versions: {bitsandbytes: "0.41.1"}\n')
    req, fc = request_from_options(config=str(cfg))
    assert fc.trainer == "axolotl" and req.versions == "axolotl==0.2.0,bitsandbytes==0.41.1"
    assert mechanism(req, "kbit_prep_kept") and mechanism(req, "bnb_keeps_input")
    newer, _ = request_from_options(config=str(cfg), trainer="axolotl==0.18.0", versions="bitsandbytes==0.45.0")
    assert newer.versions == "axolotl==0.18.0,bitsandbytes==0.45.0"
    assert not mechanism(newer, "kbit_prep_kept") and not mechanism(newer, "bnb_keeps_input")
    current, _ = request_from_options(config=str(cfg), trainer="axolotl")  # the flag's trainer: its current release
    assert current.versions == "bitsandbytes==0.41.1" and not mechanism(current, "kbit_prep_kept")


def test_plan_reads_the_pins_says_where_they_came_from_and_save_keeps_to_cheaptunes_trainer(tmp_path, model_dir):
    from cheaptune.errors import BadInput
    from cheaptune.plan.config_run import notes, read_run

    cfg = _config(tmp_path, model_dir, 'versions: {bitsandbytes: "0.42.0", peft: "0.10.0"}\n')
    run = read_run(cfg, versions="peft==0.21.2")
    assert run.request.versions == "bitsandbytes==0.42.0,peft==0.21.2"
    assert "versions pinned: bitsandbytes==0.42.0 (config), peft==0.21.2 (flag)" in notes(run)
    other = _config(tmp_path, model_dir, "trainer: hf\n", "hf.yaml")
    assert read_run(other).request.trainer == "hf"  # the settings sized as the HF Trainer runs them
    with pytest.raises(BadInput, match="drop the config key trainer: hf"):
        read_run(other, own=True)


def test_train_warns_once_per_pin_the_run_does_not_have(tmp_path, model_dir):
    from cheaptune.train.config import build

    have = metadata.version("bitsandbytes")
    same = build(_config(tmp_path, model_dir, f'versions: {{bitsandbytes: "{have}"}}\n'))
    assert same.version_notes() == []
    cfg = build(_config(tmp_path, model_dir, 'versions: {bitsandbytes: "0.42.0"}\ntrainer: litgpt\n'))
    lines = cfg.version_notes()
    assert lines[0] == (f"versions.bitsandbytes: the config pins 0.42.0, this run has {have}; the estimate was for "
                        f"0.42.0, the run trains with {have}")
    assert "trainer: litgpt sizes estimates only" in lines[1] and len(lines) == 2
