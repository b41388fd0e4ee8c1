"""The fake-tensor simulation against the same training step run on real CPU tensors."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory.simulate import simulate
from tests.estimate.conftest import request, smollm2_like

VARIANTS = [
    dict(method="full"),
    dict(method="full", grad_ckpt=True),
    dict(method="full", attn="eager"),
    dict(method="full", precision="bf16-mixed"),
    dict(method="lora"),
    dict(method="lora", grad_ckpt=True, lora_targets="qv"),
    dict(method="lora", attn="eager"),
    dict(method="qlora"),
    dict(method="qlora", grad_ckpt=True),
    dict(method="dora", lora_targets="attention"),
    dict(method="full", optimizer="sgd"),
    dict(method="lora", objective="dpo"),  # trl's preference steps: policy and reference passes, paired batch
    dict(method="full", objective="dpo"),
    dict(method="lora", objective="orpo"),
    dict(method="lora", train_modules="embed_tokens,lm_head"),  # peft modules_to_save: trained copies beside the adapter
    dict(method="qlora", trainer="unsloth", grad_ckpt=False, train_modules="embed_tokens,lm_head"),  # Unsloth's kernels
]


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_fake_peak_matches_real_cpu_run(tiny_cfg, kw):
    req = request(tiny_cfg, **kw)
    fake = simulate(req, tiny_cfg)
    real = simulate(req, tiny_cfg, real=True)
    for phase, measured in real.phase_peaks.items():
        assert abs(fake.phase_peaks[phase] - measured) <= 0.01 * measured, (phase, fake.phase_peaks, real.phase_peaks)
    assert fake.trainable_params == real.trainable_params > 0


@pytest.mark.parametrize("method", ["full", "lora"])
def test_smollm2_shape_matches_real(method):
    cfg = smollm2_like(layers=2)
    req = request(cfg, method=method, micro_batch=1, seq_len=64, grad_ckpt=method == "lora")
    fake, real = simulate(req, cfg), simulate(req, cfg, real=True)
    peak_fake, peak_real = max(fake.phase_peaks.values()), max(real.phase_peaks.values())
    assert abs(peak_fake - peak_real) <= 0.01 * peak_real
    # tied embeddings stay tied: weights counted once (49152*576 embed + 2 blocks + norm, bf16)
    adapters = fake.trainable_params if method != "full" else 0
    assert fake.total_params - adapters == 49152 * 576 + 2 * (576 * 576 * 2 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576) + 576


def test_breakdown_sums_to_peak_and_is_plausible(tiny_cfg):
    res = simulate(request(tiny_cfg, method="full"), tiny_cfg)
    peak = max(res.phase_peaks.values())
    assert sum(res.breakdown.values()) == peak
    # bf16 full FT with fused AdamW: two bf16 moments per weight, so state = 2x weights
    assert res.breakdown["optimizer_state"] == pytest.approx(2 * res.static["trainable_weights"], rel=0.02)
    assert res.breakdown.get("logits_loss", 0) > 0
