"""plan --objective sft|dpo|orpo (the training objective) and --optimize cost|time (the ranking); the old
`--objective cost|time` still ranks with a deprecation note; DPO full fine-tuning chooses its reference."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from cheaptune.plan.candidates import FitOutcome
from cheaptune.plan.sources import _reference_choice


def _pairs(tmp_path, n: int = 20):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"What is {i} plus {i}?", "chosen": f"It is {2 * i}.",
                                        "rejected": "No idea."}) + "\n" for i in range(n)))
    return path


def test_old_objective_ranking_still_works_with_one_note(run_cli):
    args = ("plan", "meta-llama/Llama-2-7b-hf", "--tokens", "1000000", "--gpu", "A100-80GB", "--method", "lora", "--json")
    code, out, err = run_cli(*args, "--objective", "time")
    assert code == 0, err
    assert err.count("deprecated") == 1 and "--optimize" in err
    old = json.loads(out)
    code, out, err = run_cli(*args, "--optimize", "time")
    assert code == 0 and "deprecated" not in err
    new = json.loads(out)
    assert old["optimize"] == new["optimize"] == "time"
    assert old["objective"] == "sft"


def test_dpo_plan_counts_pairs_and_saves_the_objective(run_cli, tiny_model_dir, tmp_path):
    data, saved = _pairs(tmp_path), tmp_path / "plan.yaml"
    common = ("plan", str(tiny_model_dir), str(data), "--gpu", "T4", "--seq-len", "64", "--method", "lora", "--json")
    code, out, err = run_cli(*common, "--objective", "dpo", "--save", str(saved))
    assert code == 0, err
    dpo = json.loads(out)
    assert dpo["objective"] == "dpo"
    assert yaml.safe_load(saved.read_text())["train"]["objective"] == "dpo"
    code, out, err = run_cli(*common, "--objective", "orpo")
    assert code == 0, err
    orpo = json.loads(out)
    # DPO adds a reference forward per token that ORPO does not have: same tokens, fewer tokens/s
    assert dpo["workload"]["tokens"] == orpo["workload"]["tokens"]
    assert dpo["options"][0]["tokens_per_s"] < orpo["options"][0]["tokens_per_s"]


def test_sft_rows_are_refused_for_dpo(run_cli, tiny_model_dir, tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    code, _, err = run_cli("plan", str(tiny_model_dir), str(data), "--gpu", "T4", "--seq-len", "64",
                           "--objective", "dpo")
    assert code == 2 and "chosen" in err and "Traceback" not in err


def _fits(copy: FitOutcome, pre: FitOutcome):
    return lambda precompute: dataclasses.replace(pre, precompute_ref=True) if precompute else copy


@pytest.mark.parametrize("copy, pre, epochs, precompute, why", [
    (FitOutcome(False, peak_bytes=90), FitOutcome(True, 2), 1.0, True, "does not fit"),
    (FitOutcome(True, 2), FitOutcome(True, 2), 3.0, True, "once instead of every one of 3 epochs"),
    (FitOutcome(True, 2), FitOutcome(True, 4), 1.0, True, "micro-batch 4 fits"),
    (FitOutcome(True, 2), FitOutcome(True, 2), 1.0, False, "frozen copy"),
])
def test_dpo_full_chooses_reference_copy_or_precompute(copy, pre, epochs, precompute, why):
    chosen = _reference_choice(_fits(copy, pre), "full", "dpo", epochs)
    assert chosen.fits and chosen.precompute_ref is precompute and why in chosen.note
    assert _reference_choice(_fits(copy, pre), "lora", "dpo", epochs) == copy  # PEFT: adapters off, no copy
    assert _reference_choice(_fits(copy, pre), "full", "orpo", epochs) == copy  # ORPO: no reference
