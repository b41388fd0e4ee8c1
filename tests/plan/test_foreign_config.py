"""Other trainers' configs as input: the stock Axolotl Llama-2 qlora.yml read whole, keys mapped or listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheaptune.errors import BadInput
from cheaptune.plan.foreign_config import read_foreign_config, request_for

STOCK = Path(__file__).parents[1] / "estimate" / "data" / "axolotl_llama2_qlora.yml"  # axolotl v0.18.0 examples/llama-2/qlora.yml


def test_stock_axolotl_qlora_is_read_whole():
    fc = read_foreign_config(STOCK)
    assert fc.trainer == "axolotl"
    assert fc.request == {"model": "NousResearch/Llama-2-7b-hf", "method": "qlora", "seq_len": 4096, "micro_batch": 2,
                          "grad_ckpt": True, "optimizer": "adamw", "attn": "flash", "lora_r": 32, "lora_alpha": 16,
                          "lora_dropout": 0.05, "lora_targets": "all-linear", "trainer": "axolotl"}
    assert {"model_type", "tokenizer_type", "special_tokens", "datasets", "wandb_project"} <= set(fc.ignored)


@pytest.mark.parametrize("text, message", [
    ("base_model: x\nsequence_len: 8\nlora_rr: 8\n", "did you mean lora_r"),
    ("base_model: x\nsequence_len: 8\nbf16: true\nfp16: true\n", "both true"),
    ("base_model: x\nsequence_len: 8\nadapter: qlora\n", "load_in_4bit"),
    ("model_name_or_path: x\nfinetuning_type: lora\nquantization_bit: 8\n", "quantization_bit 8"),
    ("checkpoint_dir: checkpoints/x\nprecision: bf16-true\ntrain: {micro_batch_size: 1}\n", "max_seq_length"),
    ("just: a mapping\n", "not an Axolotl"),
])
def test_bad_configs_get_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match=message) as err:
        read_foreign_config(path)
    assert "\n" not in str(err.value)


def test_llama_factory_and_litgpt_map_their_own_keys(tmp_path):
    lf = tmp_path / "lf.yaml"
    lf.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                  "lora_rank: 16\nlora_target: all\nquantization_bit: 4\ncutoff_len: 1024\n"
                  "per_device_train_batch_size: 2\nbf16: true\ntemplate: llama3\ndataset: alpaca_en_demo\n")
    req, fc = request_for(str(lf), None, {"model": None}, {})
    assert (req.trainer, req.method, req.lora_r, req.lora_alpha, req.grad_ckpt) == ("llama-factory", "qlora", 16, 32, True)
    assert fc.ignored == ["do_train", "template", "dataset"]
    lit = tmp_path / "lit.yaml"
    lit.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nprecision: bf16-true\nquantize: bnb.nf4\n"
                   "lora_r: 32\nlora_alpha: 16\nlora_dropout: 0.05\nlora_query: true\nlora_value: true\n"
                   "lora_mlp: true\ntrain: {micro_batch_size: 2, max_seq_length: 512, epochs: 4}\nseed: 1337\n")
    req, _ = request_for(str(lit), None, {"seq_len": 256}, {})
    assert (req.model, req.method, req.quant, req.seq_len) == ("meta-llama/Llama-2-7b-hf", "qlora", "nf4", 256)
    assert req.lora_targets == "q_proj,v_proj,mlp"


NUMERIC_KEYS = [  # (trainer's config without the key, the key's path, whole count or fraction)
    ("base_model: m/x\nadapter: lora\n", "sequence_len", "whole"),
    ("base_model: m/x\nadapter: lora\n", "micro_batch_size", "whole"),
    ("base_model: m/x\nadapter: lora\n", "lora_r", "whole"),
    ("base_model: m/x\nadapter: lora\n", "lora_alpha", "whole"),
    ("base_model: m/x\nadapter: lora\n", "lora_dropout", "fraction"),
    ("model_name_or_path: m/x\nfinetuning_type: lora\n", "cutoff_len", "whole"),
    ("model_name_or_path: m/x\nfinetuning_type: lora\n", "per_device_train_batch_size", "whole"),
    ("model_name_or_path: m/x\nfinetuning_type: lora\n", "lora_rank", "whole"),
    ("checkpoint_dir: checkpoints/m/x\nlora_r: 8\ntrain:\n  max_seq_length: 64\n", "devices", "whole"),
]


BAD_VALUES = [".nan", ".inf", "-1", "0", "2.5", "'512'", "true", "[]"]
CASES = [(base, key, value) for base, key, kind in NUMERIC_KEYS for value in BAD_VALUES
         if not (kind == "fraction" and value == "0")]  # a dropout of 0 is a run


@pytest.mark.parametrize(("base", "key", "value"), CASES, ids=[f"{k}-{v}" for _, k, v in CASES])
def test_a_config_number_that_no_run_can_have_is_one_line(tmp_path, base, key, value):
    """`sequence_len: .nan` reached the simulation (plan --config: a traceback, exit 1); each count the readers
    take is a whole number >= 1 and a dropout a fraction, else one line naming the key."""
    path = tmp_path / "c.yaml"
    path.write_text(f"{base}{key}: {value}\n")
    with pytest.raises(BadInput, match=rf"{key} must be a (whole number >= 1|number from 0 to below 1) \(got "):
        read_foreign_config(path)


def test_modules_trained_whole_are_read_from_axolotl_and_llama_factory(tmp_path):
    """Axolotl's lora_modules_to_save and LLaMA-Factory's additional_target are peft modules_to_save: read as
    --train-modules, no longer listed as changing the run unmodelled; a value that names no modules is refused."""
    ax = tmp_path / "ax.yaml"
    ax.write_text("base_model: NousResearch/Llama-2-7b-hf\nadapter: lora\nsequence_len: 512\nlora_target_linear: true\n"
                  "lora_modules_to_save: [embed_tokens, lm_head]\n")
    fc = read_foreign_config(ax)
    assert fc.request["train_modules"] == "embed_tokens,lm_head" and "lora_modules_to_save" not in fc.named
    lf = tmp_path / "lf.yaml"
    lf.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: lora\nlora_target: all\n"
                  "additional_target: embed_tokens,lm_head\ncutoff_len: 512\n")
    assert read_foreign_config(lf).request["train_modules"] == "embed_tokens,lm_head"
    ax.write_text("base_model: x\nadapter: lora\nsequence_len: 8\nlora_modules_to_save: [1]\n")
    with pytest.raises(BadInput, match="lora_modules_to_save must list module names"):
        read_foreign_config(ax)
