"""`cheaptune plan --config FILE`: the run an Axolotl / LLaMA-Factory / litgpt config describes, planned."""

from __future__ import annotations

import json

import pytest

from cheaptune.estimate.memory import EstimateRequest, estimate_memory

AXOLOTL = """base_model: {model}
model_type: LlamaForCausalLM
tokenizer_type: LlamaTokenizer
adapter: lora
lora_r: 8
lora_alpha: 16
lora_target_linear: true
sequence_len: 128
micro_batch_size: 2
gradient_accumulation_steps: 4
num_epochs: 3
gradient_checkpointing: true
wandb_project:
learning_rate: 0.0002
"""


@pytest.fixture
def tiny_model(tmp_path):
    from cheaptune.demo.tiny import tiny_llama_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_llama_config(512).to_dict()))
    return str(path)


@pytest.fixture
def plan(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))

    def _run(text: str, *args: str) -> tuple[int, dict | None, str]:
        cfg = tmp_path / "axolotl.yml"
        cfg.write_text(text)
        code, out, err = run_cli("plan", "--config", str(cfg), "--gpu", "T4,RTX4090", "--json", *args)
        return code, (json.loads(out) if code == 0 else None), err

    return _run


def test_plan_sizes_the_configs_own_run_with_its_trainer(plan, tiny_model):
    code, doc, err = plan(AXOLOTL.format(model=tiny_model), "--tokens", "100000")
    assert code == 0, err
    assert doc["workload"]["epochs"] == 3 and doc["workload"]["effective_batch"] == 8
    assert doc["workload"]["seq_len"] == 128
    own = estimate_memory(EstimateRequest(model=tiny_model, method="lora", lora_r=8, lora_alpha=16, micro_batch=2,
                                          seq_len=128, grad_ckpt=True, lora_targets="all-linear", trainer="axolotl"))
    for o in doc["options"]:
        assert (o["method"], o["micro_batch"], o["grad_accum"], o["grad_ckpt"]) == ("lora", 2, 4, True)
        assert o["peak_vram_bytes"] == own.device_total_bytes  # axolotl's step, not cheaptune's
    notes = " ".join(doc["notes"])
    assert "model_type" in notes and "wandb_project" in notes and "num_epochs" not in notes.split("ignored")[1]


def test_flags_win_and_max_steps_caps_the_epochs(plan, tiny_model):
    code, doc, err = plan(AXOLOTL.format(model=tiny_model), "--tokens", "100000", "--epochs", "2", "--seq-len", "64")
    assert code == 0, err
    assert (doc["workload"]["epochs"], doc["workload"]["seq_len"]) == (2, 64)
    code, doc, err = plan(AXOLOTL.format(model=tiny_model) + "max_steps: 100\n", "--tokens", "1024000")
    assert code == 0, err
    assert doc["workload"]["epochs"] == pytest.approx(100 * 8 * 128 / 1024000)  # 100 steps of 8 x 128 tokens


@pytest.mark.parametrize("extra, args, message", [
    ("lora_rr: 8\n", (), "did you mean lora_r"),
    ("num_epochs: -1\n", (), "num_epochs must be a positive number"),
    ("", ("--save", "plan.yaml"), "--save with --config"),
])
def test_bad_configs_and_flags_are_one_line(plan, tiny_model, extra, args, message):
    text = AXOLOTL.format(model=tiny_model).replace("num_epochs: 3\n", "") + extra
    code, _, err = plan(text, "--tokens", "1000", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_litgpt_contradictions_and_trainer_without_config(run_cli, tmp_path, tiny_model):
    lit = tmp_path / "lit.yaml"
    lit.write_text(f"checkpoint_dir: {tiny_model}\nprecision: bf16-mixed\nquantize: bnb.nf4\nlora_r: 8\n"
                   "train: {micro_batch_size: 4, max_seq_length: 128, global_batch_size: 2}\n")
    code, _, err = run_cli("plan", "--config", str(lit), "--tokens", "1000")
    assert code == 2 and "global_batch_size 2 is below" in err
    lit.write_text(lit.read_text().replace("global_batch_size: 2", "global_batch_size: 8"))
    code, _, err = run_cli("plan", "--config", str(lit), "--tokens", "1000")
    assert code == 2 and "bf16-mixed" in err
    code, _, err = run_cli("plan", tiny_model, "--tokens", "1000", "--trainer", "axolotl")
    assert code == 2 and "--trainer needs --config" in err
