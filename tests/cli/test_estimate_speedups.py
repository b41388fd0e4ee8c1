"""`estimate --gpu` says which speed options a plan turns on for that GPU and the tokens/s with them, as
`plan` prices it; the step time itself stays without them (JSON: fields added, none renamed)."""

from __future__ import annotations

import json

import pytest


def _estimate(run_cli, model_dir, gpu, *extra, method="full"):
    return run_cli("estimate", "--model", str(model_dir), "--method", method, "--micro-batch", "2",
                   "--seq-len", "64", "--gpu", gpu, *extra)


def test_estimate_names_the_plans_speed_options_and_their_tokens_per_s(run_cli, tiny_model_dir):
    code, out, err = _estimate(run_cli, tiny_model_dir, "A100-80GB", "--json")
    assert code == 0, err
    time = json.loads(out)["time"]
    fast = time["speedups"]
    assert fast["options"] == ["torch_compile"]  # measured for full fine-tunes on Ampere; Liger never was
    assert fast["factor"] == pytest.approx(1.27, rel=1e-3)
    assert fast["tokens_per_s"] == pytest.approx(time["tokens_per_s"] * fast["factor"], rel=1e-3)
    code, out, err = _estimate(run_cli, tiny_model_dir, "A100-80GB")
    assert code == 0, err
    text = " ".join(out.split())  # the console may wrap
    assert "tokens/s without speed options" in text
    assert f"with the speed options a plan turns on for A100-80GB: {fast['tokens_per_s']:,.0f} tokens/s" in text


def test_estimate_on_a_board_without_them_says_none(run_cli, tiny_model_dir):
    code, out, err = _estimate(run_cli, tiny_model_dir, "T4", "--json")
    assert code == 0, err
    time = json.loads(out)["time"]
    assert time["speedups"]["options"] == [] and time["speedups"]["tokens_per_s"] == time["tokens_per_s"]
    code, out, _ = _estimate(run_cli, tiny_model_dir, "T4")
    assert "a plan turns on no speed options for T4" in " ".join(out.split())


def test_estimate_of_a_lora_says_the_options_are_possible_and_unmeasured(run_cli, tiny_model_dir):
    code, out, err = _estimate(run_cli, tiny_model_dir, "H100", "--json", method="lora")
    assert code == 0, err
    fast = json.loads(out)["time"]["speedups"]
    assert fast["options"] == [] and fast["factor"] == 1.0
    assert fast["unmeasured_line"].startswith("possible, unmeasured for adapter fine-tunes on nvidia hopper")
    code, out, _ = _estimate(run_cli, tiny_model_dir, "H100", method="lora")
    assert "possible, unmeasured for adapter fine-tunes" in " ".join(out.split())


def test_estimate_times_each_trainers_own_stack(run_cli, tiny_model_dir):
    """--trainer picks the step-time constants of that trainer's stack (steptime.yaml stacks): Unsloth's own."""
    from cheaptune.estimate.time import throughput as tp

    speed = {}
    for trainer in ("hf", "unsloth"):
        code, out, err = _estimate(run_cli, tiny_model_dir, "A100-80GB", "--json", "--trainer", trainer, method="lora")
        assert code == 0, err
        speed[trainer] = json.loads(out)["time"]["tokens_per_s"]
    table = tp.load_table()
    assert tp.stack_constants(table, "unsloth") != tp.stack_constants(table, "hf")
    assert speed["unsloth"] != speed["hf"]  # which is faster on the tiny model depends on more than e_max
