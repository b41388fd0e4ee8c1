"""The simulated step 2 is the same, byte for byte, whether step 1 ran its forward and backward or only made the
optimizer state it leaves (simulate's default, about half the time of a simulation), and, with accumulation,
whether step 2's first micro-step ran or only made the gradients it leaves (about 40% of an accumulated one)."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory.simulate import simulate
from tests.estimate.conftest import request

CASES = {
    "lora": dict(method="lora"),
    "qlora-ckpt-8bit": dict(method="qlora", grad_ckpt=True, optimizer="adamw-8bit"),
    "full-accum": dict(method="full", grad_accum=2),
    "full-dpo": dict(method="full", objective="dpo"),
    "lora-litgpt": dict(method="lora", trainer="litgpt"),
    "lora-ckpt-accum": dict(method="lora", grad_ckpt=True, grad_accum=4),
    "qlora-dpo-accum": dict(method="qlora", objective="dpo", grad_accum=2),
    "full-dpo-ckpt-accum-unsloth": dict(method="full", objective="dpo", grad_ckpt=True, grad_accum=2, trainer="unsloth"),
}


@pytest.mark.parametrize("kw", CASES.values(), ids=CASES.keys())
def test_state_only_first_step_holds_the_same_bytes(tiny_cfg, kw):
    req = request(tiny_cfg, seq_len=32, **kw)
    fast, replayed = simulate(req, tiny_cfg), simulate(req, tiny_cfg, replay=True)
    assert fast.phase_peaks == replayed.phase_peaks and fast.breakdown == replayed.breakdown
    assert fast.static == replayed.static and fast.backward_buckets == replayed.backward_buckets
    assert fast.breakdown.get("optimizer_state", 0) > 0 or fast.peak_phase == "optimizer"
