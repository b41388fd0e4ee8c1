"""`cheaptune estimate` end to end on a local config.json."""

from __future__ import annotations

import json


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
