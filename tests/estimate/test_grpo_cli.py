"""`cheaptune estimate --objective grpo`: the memory parts, the step time and its generation share."""

from __future__ import annotations

import json


def _cfg(tmp_path, tiny_cfg) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_cfg.to_dict()))
    return str(path)


def test_grpo_estimate_prints_parts_and_generation_share(run_cli, tiny_cfg, tmp_path):
    code, out, err = run_cli("estimate", "--model", _cfg(tmp_path, tiny_cfg), "--method", "lora", "--objective",
                             "grpo", "--gpu", "H100", "--generations", "4", "--completion-len", "64",
                             "--prompt-len", "32")
    assert code == 0, err
    for part in ("policy training step", "vllm weights", "vllm kv cache", "step time", "generation"):
        assert part in out


def test_grpo_estimate_json_and_refusals(run_cli, tiny_cfg, tmp_path):
    cfg = _cfg(tmp_path, tiny_cfg)
    code, out, err = run_cli("estimate", "--model", cfg, "--method", "full", "--objective", "grpo", "--gpu", "H100",
                             "--generations", "4", "--completion-len", "64", "--prompt-len", "32", "--beta", "0.04",
                             "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert "reference copy" in obj["memory"]["parts"] and obj["time"]["parts"]["reference_logprobs"] > 0
    assert 0 < obj["time"]["generation_share"] < 1 and obj["time_at_cap"]["step_seconds"] >= obj["time"]["step_seconds"]
    code, _, err = run_cli("estimate", "--model", cfg, "--method", "lora", "--objective", "grpo", "--generations", "4",
                           "--completion-len", "64", "--prompt-len", "32")
    assert code == 2 and "needs --gpu" in err
    code, _, err = run_cli("estimate", "--model", cfg, "--method", "lora", "--objective", "grpo", "--gpu", "H100",
                           "--generations", "3", "--micro-batch", "2", "--completion-len", "64", "--prompt-len", "32")
    assert code == 2 and "multiple of --generations" in err
