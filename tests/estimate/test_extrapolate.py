"""Extrapolating from 1-2 blocks (or 2 periods) equals simulating the whole stack."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory.extrapolate import layer_period, simulate_extrapolated
from cheaptune.estimate.memory.simulate import simulate
from tests.estimate.conftest import request


@pytest.mark.parametrize("kw", [dict(method="full"), dict(method="lora", grad_ckpt=True), dict(method="qlora")],
                         ids=["full", "lora-gc", "qlora"])
def test_extrapolation_equals_full_simulation(kw):
    from cheaptune.demo.tiny import tiny_llama_config

    cfg = tiny_llama_config(512, num_hidden_layers=6)
    req = request(cfg, **kw)
    full = simulate(req, cfg)
    ext, how = simulate_extrapolated(req, cfg)
    assert how == {"layers_simulated": [2, 3], "extrapolated": True}
    for phase, v in full.phase_peaks.items():
        assert ext.phase_peaks[phase] == pytest.approx(v, rel=0.002), phase
    assert ext.total_params == full.total_params and ext.trainable_params == full.trainable_params


def test_alternating_stack_uses_two_periods():
    from transformers import Gemma2Config

    cfg = Gemma2Config(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, num_hidden_layers=8, vocab_size=256, sliding_window=16)
    assert layer_period(cfg) == (0, 2)
    req = request(cfg, method="lora", seq_len=48)
    full = simulate(req, cfg)
    ext, how = simulate_extrapolated(req, cfg)
    assert how["layers_simulated"] == [4, 6]
    assert max(ext.phase_peaks.values()) == pytest.approx(max(full.phase_peaks.values()), rel=0.002)
