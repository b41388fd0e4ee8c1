"""Versions as estimate inputs (estimate/memory/versions.py): a trainer release or library pins pick the
version-dependent mechanisms; a version not known takes the heavier side and says so."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.versions import _side, mechanisms, parse_pins, resolve, split_trainer


def test_every_mechanism_names_its_library_release_and_source():
    for name, m in mechanisms().items():
        assert m["library"] and m["on_before"] and m["source"] and isinstance(m["heavier"], bool), name


def test_a_specifier_is_before_after_or_not_known_relative_to_a_release():
    assert _side("==0.42.0", "0.43.2") == "before" and _side(">=0.45.2,<0.50", "0.43.2") == "after"
    assert _side(">=2.2.0", "2.5.0") is None and _side(">=2.2.0,<=2.4.1", "2.5.0") == "before"
    assert _side("<2.5.0", "2.5.0") == "before" and _side("", "2.5.0") is None


def test_litgpt_release_selects_its_pins_and_unknown_torch_takes_the_heavier_side():
    old = resolve("litgpt", "litgpt==0.4.9", "qlora")  # bitsandbytes==0.42.0, torch>=2.2.0 (litgpt@b0ea1772f)
    assert old.flags["bnb_keeps_input"] is True and old.libraries["bitsandbytes"] == "==0.42.0"
    assert old.flags["math_sdpa_16bit"] is False  # torch >= 2.2 straddles 2.5: the fp32 upcast, the higher peak
    assert any(n.startswith("torch version not known (>=2.2.0)") for n in old.notes)
    now = resolve("litgpt", None, "qlora")  # v0.5.13: bitsandbytes>=0.45.2, torch>=2.7
    assert now.flags["bnb_keeps_input"] is False and now.flags["math_sdpa_16bit"] is False and not now.notes
    pinned = resolve("litgpt", "bitsandbytes==0.41.1,torch==2.1.0", "qlora")
    assert pinned.flags["bnb_keeps_input"] and pinned.flags["math_sdpa_16bit"]
    assert resolve("litgpt", "litgpt==0.4.9", "lora").flags["bnb_keeps_input"] is False  # no 4-bit matmul


def test_transformers_checkpointing_switch_and_its_unchecked_releases():
    assert resolve("hf", "transformers==4.40.0", "lora").flags["reentrant_ckpt"] is True
    assert resolve("hf", None, "lora").flags["reentrant_ckpt"] is False  # installed 5.24: use_reentrant=False
    mid = resolve("hf", "transformers==5.3.0", "lora")
    assert mid.flags["reentrant_ckpt"] is False and "heavier side" in mid.notes[0]
    assert resolve("litgpt", "transformers==4.40.0", "lora").flags["reentrant_ckpt"] is False  # its own checkpointing


def test_bad_pins_and_trainer_versions_are_one_line():
    assert parse_pins("bitsandbytes==0.42.0, torch==2.1.0") == {"bitsandbytes": "0.42.0", "torch": "2.1.0"}
    assert split_trainer("litgpt==0.4.9") == ("litgpt", "0.4.9") and split_trainer("hf") == ("hf", None)
    with pytest.raises(BadInput, match="LIBRARY==VERSION"):
        parse_pins("bitsandbytes>=0.42")
    with pytest.raises(BadInput, match="no memory mechanism depends on 'numpy'"):
        parse_pins("numpy==1.0")
    with pytest.raises(BadInput, match="not a version"):
        split_trainer("litgpt==latest")


def test_foreach_adamw_holds_a_temporary_the_size_of_the_trainable_weights(tiny_cfg):
    """HF Trainer's default before torch 2.8 (adamw_torch) runs torch's multi-tensor AdamW on CUDA, whose step
    holds sqrt(exp_avg_sq) for every weight at once; the fused default since holds none of that."""
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

    assert resolve("hf", "torch==2.4.1", "full").flags["foreach_adamw"] is True
    assert resolve("hf", None, "full").flags["foreach_adamw"] is False  # installed torch 2.13: fused
    kw = dict(model=tiny_cfg.to_dict(), method="full", trainer="hf", micro_batch=1, seq_len=16, precision="bf16-true")
    old = estimate_memory(EstimateRequest(**kw, versions="torch==2.4.1"))
    new = estimate_memory(EstimateRequest(**kw))
    grow = old.phase_peaks["optimizer"] - new.phase_peaks["optimizer"]
    assert grow >= 0.9 * new.breakdown["trainable_weights"]
