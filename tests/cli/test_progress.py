"""Progress on slow steps: said on stderr with --progress (one plain line per step when stderr is not a
terminal), silent without it; stdout stays the JSON document either way."""

from __future__ import annotations

import json

import pytest

from cheaptune.cli.output import status


@pytest.mark.cold_cache
def test_estimate_says_what_it_simulates_only_when_asked(run_cli, tmp_path):
    from cheaptune.demo.tiny import tiny_llama_config

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_llama_config(512).to_dict()))
    args = ("estimate", "--model", str(cfg), "--method", "lora", "--micro-batch", "1", "--seq-len", "32", "--json")
    code, out, err = run_cli(*args, "--progress")
    assert code == 0, err
    assert err.splitlines() == [f"simulating two training steps of {cfg} (lora; cached after the first run)"]
    assert json.loads(out)["peak_allocated_bytes"] > 0
    code, out, err = run_cli(*args)
    assert code == 0 and err == "" and json.loads(out)["peak_allocated_bytes"] > 0


def test_plan_names_each_candidate_it_sizes():
    from cheaptune.cli.plan import _announced

    said: list[str] = []
    one, many = _announced(lambda m, mem, p: (m, mem, p), lambda *a: a, "tiny", said.append)
    assert one("lora", 24 * 2**30, "bf16-true") == ("lora", 24 * 2**30, "bf16-true")
    assert many("full", 80 * 2**30, 4, "zero3", True, "bf16-true")[2] == 4
    assert said[0].startswith("tiny: lora (bf16-true) on a 24 GiB GPU") and "4x 80 GiB, zero3 +offload" in said[1]
    assert _announced(one, None, "tiny", said.append)[1] is None


def test_status_repeats_nothing_and_is_silent_when_disabled(capsys):
    with status(True, "first") as say:
        say("first")
        say("second")
    with status(False, "hidden") as say:
        say("never shown")
    assert capsys.readouterr().err == "first\nsecond\n"
