"""The simulated preference step (trl's DPO and ORPO): the doubled batch, the reference, ORPO's full logits."""

from __future__ import annotations

from cheaptune.demo.tiny import tiny_llama_config
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.settings import TrainSettings

MODEL = tiny_llama_config(512, hidden_size=128, intermediate_size=352).to_dict()


def _est(method: str, objective: str, **extra):
    return estimate_memory(EstimateRequest(model=MODEL, method=method, seq_len=128, micro_batch=2,
                                           precision="fp32", objective=objective, **extra))


def test_dpo_holds_chosen_and_rejected_activations_and_the_reference_the_trainer_holds():
    sft, dpo = _est("lora", "sft"), _est("lora", "dpo")
    assert dpo.breakdown["activations"] > 1.8 * sft.breakdown["activations"]  # [chosen; rejected] rows
    assert "reference_model" not in dpo.breakdown  # PEFT: the reference is the base, adapters disabled
    full, pre = _est("full", "dpo"), _est("full", "dpo", precompute_ref=True)
    assert full.breakdown["reference_model"] == full.breakdown["trainable_weights"]  # trl's frozen copy
    assert "reference_model" not in pre.breakdown and pre.peak_allocated_bytes < full.peak_allocated_bytes
    assert "objective" not in sft.inputs and dpo.inputs["objective"] == "dpo"  # SFT cache keys unchanged


def test_orpo_runs_the_doubled_batch_without_a_reference():
    orpo, sft = _est("lora", "orpo"), _est("lora", "sft")
    assert orpo.breakdown["activations"] > 1.8 * sft.breakdown["activations"]
    assert "reference_model" not in _est("full", "orpo").breakdown


def test_plan_settings_carry_the_objective():
    s = TrainSettings(method="lora", precision="bf16-mixed", objective="dpo")
    assert s.request("x").objective == "dpo" and TrainSettings(method="lora", precision="fp32").objective == "sft"


def test_estimate_cli_takes_the_objective_and_refuses_precompute_without_dpo(run_cli, tmp_path):
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MODEL))
    common = ("estimate", "--model", str(cfg), "--method", "full", "--micro-batch", "2", "--seq-len", "128",
              "--precision", "fp32", "--json")
    code, out, err = run_cli(*common, "--objective", "dpo")
    assert code == 0, err
    copy = json.loads(out)
    code, out, _ = run_cli(*common, "--objective", "dpo", "--precompute-ref")
    assert copy["breakdown"]["reference_model"] > 0 and "reference_model" not in json.loads(out)["breakdown"]
    code, _, err = run_cli(*common, "--objective", "orpo", "--precompute-ref")
    assert code == 2 and "--precompute-ref is for --objective dpo" in err
    code, _, err = run_cli(*common, "--objective", "kto")
    assert code == 2 and "--objective 'kto' is not one of sft, dpo, orpo" in err
