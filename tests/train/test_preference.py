"""DPO and ORPO through trl on the tiny Llama: every method trains, the reference is the one the estimate
simulates, bad settings fail before any model loads, and the budget cap stops a preference run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from cheaptune.errors import BadInput
from cheaptune.train.config import validate
from cheaptune.train.run import train

ADAPTER = "adapter_model.safetensors"


def pair_rows(n: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"What is {i} plus {i}?"}],
             "chosen": [{"role": "assistant", "content": f"The answer is {2 * i}."}],
             "rejected": [{"role": "assistant", "content": f"I do not know {i}."}]} for i in range(n)]


@pytest.fixture(scope="session")
def pairs_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in pair_rows(12)) + "\n")
    return path


def _cfg(model: Path, data: Path, out: Path, objective: str, method: str, **extra):
    return validate({
        "base_model": str(model), "datasets": [{"path": str(data)}], "objective": objective, "method": method,
        "max_steps": 2, "sequence_len": 64, "micro_batch_size": 2, "output_dir": str(out), "device": "cpu",
        "save_steps": 1, "probe_steps": 0, "learning_rate": 1e-3, **extra,
    })


def _changed(out: Path, weights: str) -> list[str]:
    first, last = load_file(out / "checkpoint-1" / weights), load_file(out / "checkpoint-2" / weights)
    return [k for k in first if not first[k].equal(last[k])]


@pytest.mark.parametrize("objective", ["dpo", "orpo"])
@pytest.mark.parametrize("method", ["full", "lora", "qlora", "dora"])
def test_every_method_trains_with_each_objective(tiny_model_dir, pairs_file, tmp_path, objective, method):
    out = tmp_path / "out"
    s = train(_cfg(tiny_model_dir, pairs_file, out, objective, method)).summary
    assert s["steps"] == 2 and s["method"] == method and s["tokens"] > 0
    weights = "model.safetensors" if method == "full" else ADAPTER
    assert (out / weights).is_file() and _changed(out, weights), f"{objective}/{method}: no weight changed"


def test_dpo_reference_is_what_the_estimate_simulates(tiny_model_dir, pairs_file, tmp_path):
    """PEFT: adapters disabled (trl's frozen adapter copy dropped); full: a frozen copy, or none when precomputed."""
    from cheaptune.train.methods import build_model, resolve_precision
    from cheaptune.train.preference import build_preference_trainer
    from cheaptune.train.run import load_data

    def built(method: str, **extra):
        cfg = _cfg(tiny_model_dir, pairs_file, tmp_path / method, "dpo", method, **extra)
        from transformers import AutoTokenizer

        prec, (ds, _, fmt) = resolve_precision(cfg), load_data(cfg)
        return build_preference_trainer(cfg, prec, build_model(cfg, prec), AutoTokenizer.from_pretrained(
            cfg.base_model), ds, None, fmt, [])

    lora = built("lora")
    assert lora.ref_model is None and list(lora.model.peft_config) == ["default"]
    full = built("full")
    assert full.ref_model is not None and full.ref_model is not full.model  # a second copy (run under no_grad)
    pre = built("full", precompute_ref_log_probs=True)
    assert pre.ref_model is None and {"ref_chosen_logps", "ref_rejected_logps"} <= set(pre.train_dataset.column_names)


@pytest.mark.parametrize("raw, problem", [
    ({"objective": "dpo", "method": "ia3"}, "objective dpo trains full, lora, qlora, dora; not ia3"),
    ({"rl": "ppo"}, "objective"),
    ({"rl": "dpo", "lora_targets": "all-linear,lm_head"}, "drop lm_head"),
    ({"objective": "orpo", "beta": 0}, "beta"),
])
def test_bad_preference_settings_are_one_line(raw, problem):
    with pytest.raises(BadInput, match=problem):
        validate({"base_model": "x", **raw})


def test_axolotl_rl_alias_and_cli_flag(tiny_model_dir, pairs_file, tmp_path, run_cli):
    assert validate({"rl": "orpo", "rl_beta": 0.2}).objective == "orpo"
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(pairs_file), "-o",
                           str(tmp_path / "o"), "--objective", "sft", "--device", "cpu", "--max-steps", "1")
    assert code == 2 and "pairs.jsonl:1: unknown shape" in err  # pairs are not SFT rows: said, not a traceback


def test_budget_cap_stops_a_dpo_run_resumably(tiny_model_dir, pairs_file, tmp_path, run_cli):
    from cheaptune.runs.registry import Registry

    out = tmp_path / "out"
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(pairs_file), "-o", str(out),
                           "--objective", "dpo", "--device", "cpu", "--max-steps", "50", "--seq-len", "64",
                           "--price-per-hour", "36000", "--budget", "2", "--probe-steps", "0")
    assert code == 10, err
    run = Registry().list_runs()[0]
    assert run["status"] == "budget-stopped" and any(p.name.startswith("checkpoint-") for p in out.iterdir())
