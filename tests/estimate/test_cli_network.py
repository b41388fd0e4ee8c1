"""`cheaptune estimate --network`: the network between --nodes reaches the step time; a bad value is one line."""

from __future__ import annotations

import json


def _write_cfg(tmp_path, tiny_cfg) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_cfg.to_dict()))
    return str(path)


def test_estimate_network_flag_times_the_nodes_and_refuses_bad_values(run_cli, tiny_cfg, tmp_path):
    base = ("estimate", "--model", _write_cfg(tmp_path, tiny_cfg), "--method", "lora", "--micro-batch", "2",
            "--seq-len", "64", "--json", "--gpu", "H100", "--gpu-count", "8", "--nodes", "2", "--sharding", "fsdp")
    times = {}
    for net in ("ethernet", "100gbit"):
        code, out, err = run_cli(*base, "--network", net)
        assert code == 0, err
        times[net] = json.loads(out)["time"]
        assert times[net]["network"] == net
    comm = {k: v["parts"]["communication"] for k, v in times.items()}
    assert comm["ethernet"] > comm["100gbit"] > 0
    code, out, err = run_cli(*base, "--network", "100gbps")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "100gbit" in err
