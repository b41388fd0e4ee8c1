"""`cheaptune plan --config FILE`: the run an Axolotl / LLaMA-Factory / litgpt config describes, planned."""

from __future__ import annotations

import json

import pytest

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from tests.helpers import differences

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
                                          seq_len=128, grad_ckpt=True, lora_targets="all-linear", trainer="axolotl",
                                          grad_accum=4))  # 2 x 4 = 8 sequences per step: the gradients held
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
    ("", ("--save", "plan.yaml", "--trainer", "axolotl"), "--save sizes the run `cheaptune train` makes"),
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


OWN = """base_model: {model}
method: lora
lora_r: 8
lora_alpha: 16
lora_targets: qv
lora_dropout: 0.05
datasets:
  - path: rows.jsonl
    type: messages
sequence_len: 64
micro_batch_size: 2
gradient_accumulation_steps: 2
num_epochs: 2
sample_prompts: [hi]
"""


def _saved(run_cli, config, *args: str):
    from cheaptune.plan import planfile

    out = config.parent / "plan.yaml"
    code, doc, err = run_cli("plan", "--config", str(config), "--spot", "never", "--save", str(out), "--json", *args)
    assert code == 0, err
    return planfile.load(out), out, json.loads(doc)


def test_a_cheaptune_config_plan_saves_what_train_then_runs(run_cli, tiny_model_dir, tmp_path, monkeypatch):
    """plan --config --save -> train --plan: the trainer built from the plan file runs the settings the plan
    sized (read back from the built trainer), on the config's dataset; the config with the plan changes nothing."""
    from cheaptune.train.config import build
    from cheaptune.train.settings import read_back
    from tests.train.test_plan_run_agree import _built_trainer

    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))
    rows = [{"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"ok {i}"}]}
            for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "own.yaml"
    config.write_text(OWN.format(model=tiny_model_dir))
    planned, plan_path, doc = _saved(run_cli, config, "--gpu", "T4")
    assert planned.dataset == str((tmp_path / "rows.jsonl").resolve())  # beside the config, made absolute
    t = planned.train
    assert (t.method, t.precision, t.lora_r, t.lora_alpha, t.lora_targets) == ("lora", "fp16-mixed", 8, 16, "qv")
    assert t.lora_dropout == 0.05  # sized and run with the config's dropout (its dropped input copies)
    assert (t.micro_batch, t.grad_accum, t.seq_len, t.epochs, t.loss) == (2, 2, 64, 2.0, "trl")
    assert "sized as cheaptune train runs the config" in " ".join(doc["notes"])
    cfg = build(None, plan_path, {"device": "cpu", "output_dir": str(tmp_path / "out")})
    assert [d.path for d in cfg.datasets] == [planned.dataset]
    ran = read_back(_built_trainer(tiny_model_dir, cfg))
    assert differences(ran, t) == {"lora_targets": ("q_proj,v_proj", "qv")}  # qv, spelled out
    assert estimate_memory(t.request(planned.model)).device_total_bytes == planned.prediction.peak_vram_bytes
    assert build(config, plan_path, {})._plan_overrides == {}


def test_the_stock_axolotl_qlora_config_saves_cheaptunes_run_and_says_axolotls_peak(run_cli, tiny_model_dir,
                                                                                   tmp_path, monkeypatch):
    """Axolotl's own examples/llama-2/qlora.yml (on the tiny model): the plan file holds the run cheaptune
    trains from it, read back unchanged by `train --plan`; the one setting it cannot keep is said."""
    from pathlib import Path

    from cheaptune.train.config import build
    from cheaptune.train.settings import from_config

    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))
    stock = Path(__file__).parents[1] / "estimate" / "data" / "axolotl_llama2_qlora.yml"
    config = tmp_path / "qlora.yml"
    config.write_text(stock.read_text())
    planned, plan_path, doc = _saved(run_cli, config, "--model", str(tiny_model_dir), "--seq-len", "64",
                                     "--tokens", "20000", "--gpu", "A100-80GB")
    t = planned.train
    assert (t.method, t.quant, t.precision, t.optimizer, t.attn, t.grad_ckpt) == \
        ("qlora", "nf4-dq", "bf16-true", "adamw", "flash", True)
    assert (t.lora_r, t.lora_alpha, t.lora_targets, t.micro_batch, t.grad_accum, t.epochs) == \
        (32, 16, "all-linear", 2, 4, 4.0)
    assert planned.dataset is None  # a hub dataset: train takes --data
    cfg = build(None, plan_path, {"output_dir": str(tmp_path / "out")})
    assert from_config(cfg, cfg.precision) == t  # train --plan reads back exactly the saved settings
    assert estimate_memory(t.request(planned.model)).device_total_bytes == planned.prediction.peak_vram_bytes
    notes = " ".join(doc["notes"])
    assert "axolotl would peak at" in notes and "paged_adamw_32bit is planned and saved as adamw_torch_fused" in notes
    same = build(config, plan_path, {"base_model": str(tiny_model_dir), "sequence_len": 64})
    assert set(same._plan_overrides) == {"optimizer"}  # the config's paged optimizer, the one setting said above


def test_a_config_is_priced_at_its_own_speed_options(run_cli, tiny_model_dir, tmp_path, monkeypatch):
    """A config that turns on liger_kernel runs it (and not the planner's torch.compile); Liger was never measured
    for a LoRA on an Ampere board, so it is priced without its factor and the plan says so; --no-speedups
    turns it off."""
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "home"))
    rates = {}
    for name, extra, args in [("plain", "", ()), ("liger", "liger_kernel: true\n", ()),
                              ("off", "liger_kernel: true\n", ("--no-speedups",))]:
        config = tmp_path / f"{name}.yaml"
        config.write_text(OWN.format(model=tiny_model_dir) + extra)
        code, out, err = run_cli("plan", "--config", str(config), "--tokens", "100000", "--gpu", "A100-80GB",
                                 "--spot", "never", "--json", *args)
        assert code == 0, err
        doc = json.loads(out)
        best = doc["recommended"]
        rates[name] = best["tokens_per_s"]
        assert best["details"]["speedups"]["options"] == (["liger_kernel"] if name == "liger" else [])
        assert best["details"]["speedups"]["priced"] == []
        if name == "liger":
            line = next(n for n in doc["notes"] if n.startswith("possible, unmeasured"))
            assert "liger_kernel on as the config asks, priced without its factor" in line
    assert rates["liger"] == pytest.approx(rates["plain"])
    assert rates["off"] == pytest.approx(rates["plain"])
