"""Unsloth's hand-written kernels keep less for backward than the HF ops with peft (estimate/memory/unsloth_kernels.py):
each stand-in is checked against what the kernel's save_for_backward names."""

from __future__ import annotations

import dataclasses

import pytest

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.memory.profiles import _profiles, get_profile
from tests.estimate.conftest import smollm2_like

TOKENS = 2 * 128


def _activations(cfg: dict, alpha: int, kernels: bool = True, **kw) -> int:
    req = dict(model=cfg, method="lora", micro_batch=2, seq_len=128, grad_ckpt=False, trainer="unsloth",
               full_sim=True, lora_alpha=alpha)  # each variant its own cache key: the profile is patched in memory
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "unsloth", dataclasses.replace(get_profile("unsloth"), fused_kernels=kernels))
        return estimate_memory(EstimateRequest(**{**req, **kw})).breakdown["activations"]


def test_the_fused_kernels_keep_less_than_the_hf_ops_and_at_least_what_they_save():
    """Per token and layer Unsloth keeps the two norm inputs, the attention input, the MLP input and its gate and up
    outputs (and SDPA's own q, k, v and output); peft's LoRA layers keep fp32 copies of their inputs besides."""
    cfg = {**smollm2_like(2).to_dict(), "num_key_value_heads": 9}  # no GQA: the repeated K/V term is 0
    h, i, layers = cfg["hidden_size"], cfg["intermediate_size"], 2
    fused, plain = _activations(cfg, 41), _activations(cfg, 42, kernels=False)
    kernel_saves = TOKENS * layers * (4 * h + 2 * i) * 2  # norms' X x2, attention X, MLP X, e, g in bf16
    assert kernel_saves < fused < plain
    assert plain - fused >= TOKENS * layers * 2 * i * 2  # at least the MLP's activation and product it recomputes


def test_lora_dropout_leaves_the_lora_kernels_unpatched_as_unsloth_does():
    """models/llama.py patches the LoRA kernels only with lora_dropout 0: with dropout, only the norms change."""
    cfg = {**smollm2_like(2).to_dict(), "num_key_value_heads": 9}
    no_drop = _activations(cfg, 43)
    dropped = _activations(cfg, 44, lora_dropout=0.05)
    plain_dropped = _activations(cfg, 45, kernels=False, lora_dropout=0.05)
    assert no_drop < dropped < plain_dropped


def test_xformers_repeats_k_and_v_per_query_head_unless_flash_attention():
    """With fewer key/value heads than query heads (SmolLM2: 9 and 3), xformers holds K and V copied to all 9 heads:
    2 x (9 - 3) x head_dim more per token and layer than flash attention, which takes the 3 as they are."""
    cfg = smollm2_like(2).to_dict()
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    xformers, flash = _activations(cfg, 46, attn="sdpa"), _activations(cfg, 47, attn="flash")
    assert xformers - flash == pytest.approx(TOKENS * 2 * 2 * (9 - 3) * head_dim * 2, rel=0.02)
