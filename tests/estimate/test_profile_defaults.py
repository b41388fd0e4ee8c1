"""A trainer profile's defaults (data/profiles.yaml) apply when the user states no setting; a flag or config wins."""

from __future__ import annotations

import json

import pytest


def _estimate(run_cli, cfg: str, *extra: str) -> dict:
    code, out, err = run_cli("estimate", "--model", cfg, "--method", "lora", "--micro-batch", "2", "--seq-len", "64",
                             "--gpu", "H100", "--json", *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def cfg(tiny_cfg, tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_cfg.to_dict()))
    return str(path)


@pytest.mark.parametrize("trainer", ["unsloth", "llama-factory"])
def test_a_profiles_gradient_checkpointing_applies_unless_a_flag_says_otherwise(run_cli, cfg, trainer):
    default = _estimate(run_cli, cfg, "--trainer", trainer)
    off = _estimate(run_cli, cfg, "--trainer", trainer, "--no-grad-ckpt")
    on = _estimate(run_cli, cfg, "--trainer", trainer, "--grad-ckpt")
    assert default["inputs"]["grad_ckpt"] is True and off["inputs"]["grad_ckpt"] is False
    assert default["device_total_bytes"] == on["device_total_bytes"] < off["device_total_bytes"]
    # the time model sees the same setting: the recompute pass costs a step with checkpointing
    assert default["time"]["step_seconds"] == on["time"]["step_seconds"] > off["time"]["step_seconds"]


def test_profiles_without_checkpointing_keep_it_off(run_cli, cfg):
    for trainer in ("cheaptune", "hf", "litgpt"):
        assert _estimate(run_cli, cfg, "--trainer", trainer)["inputs"]["grad_ckpt"] is False


def test_an_explicit_flag_wins_over_a_configs_key(run_cli, cfg, tmp_path):
    path = tmp_path / "lf.yaml"
    path.write_text(f"model_name_or_path: {cfg}\nstage: sft\nfinetuning_type: lora\ncutoff_len: 64\n"
                    "per_device_train_batch_size: 2\nbf16: true\n")
    code, out, err = run_cli("estimate", "--config", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["grad_ckpt"] is True  # LLaMA-Factory checkpoints unless told not to
    code, out, err = run_cli("estimate", "--config", str(path), "--no-grad-ckpt", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["grad_ckpt"] is False


def test_a_cheaptune_config_sized_as_another_trainer_takes_its_defaults_for_unstated_keys(run_cli, cfg, tmp_path):
    path = tmp_path / "own.yaml"
    path.write_text(f"base_model: {cfg}\nmethod: lora\nsequence_len: 64\nmicro_batch_size: 2\n")

    def inputs(*extra: str) -> dict:
        code, out, err = run_cli("estimate", "--config", str(path), "--json", *extra)
        assert code == 0, err
        return json.loads(out)["inputs"]

    assert inputs()["grad_ckpt"] is False  # cheaptune's own run of it
    unsloth = inputs("--trainer", "unsloth")
    assert unsloth["grad_ckpt"] is True and unsloth["lora_dropout"] == 0.0 and unsloth["loss"] == "chunked"
    path.write_text(path.read_text() + "gradient_checkpointing: false\nlora_dropout: 0.1\n")
    stated = inputs("--trainer", "unsloth")
    assert stated["grad_ckpt"] is False and stated["lora_dropout"] == 0.1
