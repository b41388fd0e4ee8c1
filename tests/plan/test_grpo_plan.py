"""`plan --objective grpo`: placements x GPU counts ranked by cost, hosted RL alternatives, the RL warnings."""

from __future__ import annotations

import json

import pytest

from cheaptune.catalog.models import resolve_model
from cheaptune.errors import BadInput
from cheaptune.plan import grpo

MODEL = "HuggingFaceTB/SmolLM2-135M"


def _job(**kw):
    kw.setdefault("num_generations", 4)
    kw.setdefault("prompt_len", 32)
    kw.setdefault("max_completion_length", 64)
    return grpo.RlJob.of(resolve_model(MODEL), "lora", 400, None, 1.0, 16, **kw)


def test_steps_from_prompts_and_bad_batches():
    assert _job().steps == 100  # 400 prompts / (16 completions / 4 generations)
    with pytest.raises(BadInput, match="multiple of --generations"):
        grpo.RlJob.of(resolve_model(MODEL), "lora", 10, None, 1.0, 10, num_generations=4)


def test_placements_tried():
    assert grpo.placements(1) == [("colocate", 0)]
    assert grpo.placements(8) == [("colocate", 0), ("server", 1), ("server", 4)]  # not only open-r1's 1 of 8


def test_warnings_and_hosted_alternatives():
    job = _job()
    opt = grpo.RlOption("H100", 4, "server", "x", 8.0, 10, 20, 0.8, 1, 2, 10.0, 20.0, 10.0, server_gpus=1)
    warn = grpo.warnings(job, [opt], None)
    assert any("no budget" in w for w in warn) and any("3 wait" in w for w in warn)
    assert any("over the $5.00 budget" in w for w in grpo.warnings(job, [opt], 5.0))
    hosted = grpo.hosted_rl(resolve_model(MODEL).params, job)
    assert any(h.startswith("fireworks: $0.00") and "2026-10-07" in h for h in hosted)
    assert not any(h.startswith("fireworks") for h in grpo.hosted_rl(70e9, job))


def test_plan_ranks_placements_and_counts_by_cost(run_cli, monkeypatch):
    from types import SimpleNamespace

    from cheaptune.estimate.memory import grpo_memory

    step = SimpleNamespace(device_total_bytes=2 * 2**30, total_params=resolve_model(MODEL).params,
                           trainable_params=1_000_000)  # the simulator's policy step, tested in tests/estimate
    monkeypatch.setattr(grpo_memory, "_policy_step", lambda setup: step)
    code, out, err = run_cli("plan", "--model", MODEL, "--objective", "grpo", "--prompts", "400", "--generations", "4",
                             "--completion-len", "64", "--prompt-len", "32", "--effective-batch", "16",
                             "--gpu", "H100", "--max-gpus", "2", "--prices", "bundled", "--json")
    assert code == 0, err
    plan = json.loads(out)
    totals = [o["total"] for o in plan["options"]]
    assert totals == sorted(totals) and {o["placement"] for o in plan["options"]} == {"colocate", "server"}
    assert {o["gpus"] for o in plan["options"]} == {1, 2}
    assert all(o["total_at_cap"] >= o["total"] and 0 < o["generation_share"] < 1 for o in plan["options"])
    code, _, err = run_cli("plan", "--model", MODEL, "--objective", "grpo")
    assert code == 2 and "needs the prompts" in err


def test_prompt_file_counts_rows(tmp_path):
    from cheaptune.cli.grpo import count_prompts

    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    csv = tmp_path / "p.csv"
    csv.write_text("prompt,answer\nx,1\ny,2\nz,3\n")
    assert count_prompts(jsonl) == 2 and count_prompts(csv) == 3
    txt = tmp_path / "p.txt"
    txt.write_text("a\n")
    with pytest.raises(BadInput, match="jsonl or .csv"):
        count_prompts(txt)
    empty = tmp_path / "empty.csv"
    empty.write_text("prompt\n")
    with pytest.raises(BadInput, match="no prompt rows"):
        count_prompts(empty)
