"""A stock Axolotl config read whole by `train` and `doctor`: keys mapped, ignored once, or named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cheaptune.errors import BadInput
from cheaptune.train.config import build, validate

STOCK = Path(__file__).parents[1] / "estimate" / "data" / "axolotl_llama2_qlora.yml"  # axolotl examples/llama-2/qlora.yml


def stock() -> dict:
    return yaml.safe_load(STOCK.read_text())


def test_stock_qlora_yml_validates_with_its_keys_mapped():
    cfg = build(STOCK)
    assert (cfg.method, cfg.quant, cfg.attn, cfg.bf16) == ("qlora", "nf4-dq", "flash", None)  # bf16: auto -> per GPU
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_targets, cfg.sequence_len) == (32, 16, "all-linear", 4096)
    assert (cfg.micro_batch_size, cfg.gradient_accumulation_steps, cfg.num_epochs) == (2, 4, 4)
    notes = cfg.foreign_notes("qlora.yml")
    assert len(notes) == 1 and notes[0].startswith("qlora.yml: ignored")
    for key in ("model_type", "tokenizer_type", "special_tokens", "tf32", "wandb_project", "evals_per_epoch"):
        assert key in notes[0]
    assert "num_epochs" not in notes[0] and "attn_implementation" not in notes[0]  # read, not ignored


def test_keys_trained_differently_are_named_and_int8_stays_refused():
    cfg = validate({**stock(), "deepspeed": "zero3.json", "plugins": ["cut_cross_entropy"]})
    assert cfg.foreign_notes("c")[1] == "c: not honoured (cheaptune trains these its own way): deepspeed, plugins"
    with pytest.raises(BadInput, match="int8|8-bit|8bit"):
        validate({**stock(), "load_in_8bit": True, "load_in_4bit": False, "adapter": "lora"})


@pytest.mark.parametrize("extra, message", [
    ({"flash_attention": True, "attn_implementation": "eager"}, "different attention kernels"),
    ({"attn_implementation": "triton"}, "attn_implementation 'triton'"),
    ({"lora_rr": 8}, "did you mean"),
])
def test_bad_axolotl_keys_are_one_line(extra, message):
    with pytest.raises(BadInput, match=message) as err:
        validate({**stock(), **extra}, "c.yml")
    assert "\n" not in str(err.value)


def test_doctor_reads_the_stock_file_and_lists_ignored_keys_once(run_cli):
    code, out, err = run_cli("doctor", str(STOCK))
    assert code == 0, err
    lines = [line for line in err.splitlines() if "ignored" in line]
    assert len(lines) == 1 and "model_type" in lines[0]
    assert "unknown key" not in out + err
