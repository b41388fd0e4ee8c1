"""Every method trains a few steps on the tiny Llama, and its trainable weights keep changing after an eval."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from cheaptune.train.config import validate
from cheaptune.train.run import train

ADAPTER = "adapter_model.safetensors"


def _cfg(model, data, out, method, **extra):
    return validate({
        "base_model": str(model), "datasets": [{"path": str(data)}], "method": method, "max_steps": 3,
        "sequence_len": 64, "micro_batch_size": 2, "output_dir": str(out), "device": "cpu",
        "val_set_size": 0.25, "eval_steps": 1, "save_steps": 1, "save_total_limit": 5, **extra,
    })


@pytest.mark.parametrize("method", ["full", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning"])
def test_method_trains_and_keeps_learning_after_eval(tiny_model_dir, chat_file, tmp_path, method):
    out = tmp_path / "out"
    # Sample prompts force a no-grad generate before training, as eval does at every step here:
    # the AVX512-BF16 trap would freeze QLoRA's LoRA weights after the first one.
    result = train(_cfg(tiny_model_dir, chat_file, out, method, sample_prompts=["What is 1 plus 1?"]))
    s = result.summary
    assert s["steps"] == 3 and s["method"] == method and s["precision"] == "fp32"
    assert s["final_eval_loss"] is not None and s["tokens"] > 0
    weights = "model.safetensors" if method == "full" else ADAPTER
    assert (out / weights).is_file()
    first, last = load_file(out / "checkpoint-1" / weights), load_file(out / "checkpoint-3" / weights)
    changed = [k for k in first if not first[k].equal(last[k])]
    assert changed, f"{method}: no trainable weight changed between step 1 and step 3 (after evals)"
    if method in ("qlora", "dora"):
        assert any("lora_B" in k for k in changed)


def test_qlora_layers_are_4bit_with_avx512bf16_disabled(tiny_model_dir):
    import bitsandbytes as bnb

    from cheaptune.train.methods import build_model, resolve_precision

    cfg = validate({"base_model": str(tiny_model_dir), "method": "qlora", "device": "cpu"})
    model = build_model(cfg, resolve_precision(cfg))
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and all(m.support_avx512bf16_for_cpu is False for m in layers)
    assert layers[0].weight.quant_state.quant_type == "nf4"
    assert layers[0].weight.quant_state.nested  # double quantisation


def test_lora_target_presets(tiny_model_dir):
    from cheaptune.train.methods import build_model, resolve_precision

    cfg = validate({"base_model": str(tiny_model_dir), "method": "lora", "lora_targets": "qv", "device": "cpu"})
    model = build_model(cfg, resolve_precision(cfg))
    assert set(model.peft_config["default"].target_modules) == {"q_proj", "v_proj"}
    cfg = validate({"base_model": str(tiny_model_dir), "lora_targets": "mlp,lm_head", "device": "cpu"})
    model = build_model(cfg, resolve_precision(cfg))
    assert set(model.peft_config["default"].target_modules) == {"gate_proj", "up_proj", "down_proj", "lm_head"}


def test_lora_target_modules_naming_no_module_is_one_line(tiny_model_dir):
    """peft's NoMatchingPeftModuleError escaped train as a traceback, exit 1 (issue 33's field sweep)."""
    from cheaptune.errors import BadInput
    from cheaptune.train.methods import build_model, resolve_precision

    cfg = validate({"base_model": str(tiny_model_dir), "lora_target_modules": ["banana"], "device": "cpu"})
    with pytest.raises(BadInput, match=r"lora_target_modules \['banana'\]: .*banana") as err:
        build_model(cfg, resolve_precision(cfg))
    assert "\n" not in str(err.value)
