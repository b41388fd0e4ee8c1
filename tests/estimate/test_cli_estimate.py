"""`cheaptune estimate` end to end on a local config.json."""

from __future__ import annotations

import json

import pytest


def _write_cfg(tmp_path, tiny_cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_cfg.to_dict()))
    return str(path)


def test_json_output_has_the_contract_keys(run_cli, tiny_cfg, tmp_path):
    code, out, err = run_cli("estimate", "--model", _write_cfg(tmp_path, tiny_cfg), "--method", "qlora",
                             "--micro-batch", "2", "--seq-len", "64", "--lora-targets", "qv,lm_head", "--json")
    assert code == 0, err
    obj = json.loads(out)
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "breakdown", "phase_peaks",
                "trainable_params", "total_params", "basis", "inputs", "version"):
        assert key in obj
    assert obj["inputs"]["quant"] == "nf4-dq" and obj["basis"] == "simulated"


def test_table_output_and_bad_input(run_cli, tiny_cfg, tmp_path):
    cfg = _write_cfg(tmp_path, tiny_cfg)
    code, out, _ = run_cli("estimate", "--model", cfg, "--method", "full", "--micro-batch", "1", "--seq-len", "32")
    assert code == 0 and "peak allocated" in out and "H100" in out
    code, out, err = run_cli("estimate", "--model", cfg, "--method", "lora", "--micro-batch", "1",
                             "--seq-len", "32", "--lora-targets", "nope")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "q_proj" in err
    code, _, err = run_cli("estimate", "--model", str(tmp_path / "missing"), "--method", "lora",
                           "--micro-batch", "1", "--seq-len", "32")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_gpus_and_sharding_give_a_per_gpu_peak(run_cli):
    def peak(*extra: str) -> dict:
        code, out, err = run_cli("estimate", "--model", "llama-2-7b", "--method", "full", "--micro-batch", "1",
                                 "--seq-len", "128", "--json", *extra)
        assert code == 0, err
        return json.loads(out)

    one, ddp = peak(), peak("--gpu-count", "4", "--sharding", "ddp")
    z3 = peak("--gpu-count", "4", "--sharding", "zero3")
    assert z3["device_total_bytes"] < 0.75 * one["device_total_bytes"]
    assert z3["basis"].endswith("+zero3") and z3["inputs"]["gpus"] == 4
    buffers = ddp["breakdown"]["ddp_buckets"] + ddp["breakdown"]["nccl_buffers"]
    assert ddp["peak_allocated_bytes"] == one["peak_allocated_bytes"] + ddp["breakdown"]["ddp_buckets"]
    assert one["device_total_bytes"] + buffers <= ddp["device_total_bytes"] <= 1.2 * (one["device_total_bytes"] + buffers)
    code, _, err = run_cli("estimate", "--model", "llama-2-7b", "--method", "full", "--micro-batch", "1",
                           "--seq-len", "128", "--gpu-count", "2", "--offload")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--offload" in err


def test_gpu_adds_the_step_time_the_planner_uses(run_cli, tiny_cfg, tmp_path):
    """`--gpu` adds a `time` object (total tokens/s, seconds per optimizer step, MFU, parts); the parts add
    up to the step; two GPUs with DDP are faster in total but not twice; no --gpu, no time."""
    cfg = _write_cfg(tmp_path, tiny_cfg)
    base = ("estimate", "--model", cfg, "--method", "lora", "--micro-batch", "2", "--seq-len", "64", "--json")
    code, out, err = run_cli(*base)
    assert code == 0, err
    assert "time" not in json.loads(out)
    code, out, err = run_cli(*base, "--gpu", "A100-80GB", "--grad-accum", "4")
    assert code == 0, err
    one = json.loads(out)["time"]
    assert one["gpu"] == "A100-80GB" and one["gpus"] == 1 and one["grad_accum"] == 4
    assert sum(one["parts"].values()) == pytest.approx(one["step_seconds"], rel=1e-4)
    assert one["tokens_per_s"] == pytest.approx(2 * 64 * 4 / one["step_seconds"], rel=1e-6)
    code, out, err = run_cli(*base, "--gpu", "A100-80GB", "--grad-accum", "4", "--gpu-count", "2")
    two = json.loads(out)["time"]
    assert code == 0 and two["gpus"] == 2 and one["tokens_per_s"] < two["tokens_per_s"] <= 2 * one["tokens_per_s"]
    code, _, err = run_cli(*base, "--gpu", "NoSuchGPU")
    assert code == 2 and "Traceback" not in err
