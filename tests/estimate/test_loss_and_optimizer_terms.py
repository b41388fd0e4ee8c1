"""Terms of the memory bench's trainers that a plain HF step does not hold: Unsloth's in-place cross-entropy and a
run's own fused AdamW (no foreach temporaries under a profile that builds foreach)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.memory.profiles import _profiles, get_profile


def test_inplace_cross_entropy_returns_the_logits_as_their_gradient():
    """Unsloth's Fast_CrossEntropyLoss writes dloss * softmax into the logits and returns them: the gradient that
    reaches the head is the logits' own storage, no second [tokens, vocab] tensor."""
    from cheaptune.estimate.memory.simulate import _InplaceCrossEntropy

    seen = {}
    logits = torch.randn(6, 50, requires_grad=True)
    held = logits * 1.0
    held.register_hook(lambda g: seen.update(ptr=g.data_ptr()))
    _InplaceCrossEntropy.apply(held).backward()
    assert seen["ptr"] == held.data_ptr() and logits.grad.shape == logits.shape


def test_unsloth_profile_holds_one_logits_copy_less_than_a_log_softmax_loss(tiny_cfg):
    cfg = {**tiny_cfg.to_dict(), "vocab_size": 8192, "num_hidden_layers": 1}  # logits, not weights, set the peak
    kw = dict(model=cfg, method="lora", micro_batch=1, seq_len=64, trainer="unsloth")
    inplace = estimate_memory(EstimateRequest(**kw)).peak_allocated_bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "unsloth", dataclasses.replace(get_profile("unsloth"), loss_inplace=False))
        log_softmax = estimate_memory(EstimateRequest(**kw, full_sim=True)).peak_allocated_bytes
    one_logits_copy = 64 * cfg["vocab_size"] * 2  # [b*s, vocab] in the 16-bit compute dtype
    assert log_softmax - inplace >= one_logits_copy


def test_adamw_fused_drops_the_foreach_temporary_a_profile_would_add(tiny_cfg):
    """The HF Trainer on torch < 2.8 builds torch's AdamW without fused=True (foreach on CUDA: one temporary per
    trainable weight at the step); --optimizer adamw-fused is the run that asks for the fused kernel itself."""
    kw = dict(model=tiny_cfg.to_dict(), method="full", micro_batch=1, seq_len=32, trainer="hf", versions="torch==2.4.1")
    foreach = estimate_memory(EstimateRequest(**kw)).phase_peaks["optimizer"]
    fused = estimate_memory(EstimateRequest(**kw, optimizer="adamw-fused"))
    trainable_bf16 = fused.trainable_params * 2
    assert foreach - fused.phase_peaks["optimizer"] >= 0.9 * trainable_bf16


def test_accumulation_holds_every_gradient_through_the_next_micro_steps_forward(tiny_cfg):
    """zero_grad runs after the optimizer step only, so with --grad-accum > 1 the second micro-step's forward starts
    with the first's gradients in .grad (litgpt, HF Trainer, trl alike); one micro-step per step holds none then."""
    kw = dict(model=tiny_cfg.to_dict(), method="full", micro_batch=2, seq_len=64)
    one = estimate_memory(EstimateRequest(**kw))
    accum = estimate_memory(EstimateRequest(**kw, grad_accum=8))
    grads = one.trainable_params * 2  # bf16-true: a bf16 gradient per weight
    assert abs(accum.phase_peaks["forward"] - one.phase_peaks["forward"] - grads) <= 0.01 * grads
    assert accum.inputs["grad_accum"] == 8 and "grad_accum" not in one.inputs  # old cache keys stay


def test_grad_accum_below_one_is_one_clear_line(tiny_cfg):
    from cheaptune.errors import BadInput

    with pytest.raises(BadInput, match="--grad-accum must be >= 1|--grad-accum"):
        estimate_memory(EstimateRequest(model=tiny_cfg.to_dict(), method="lora", grad_accum=0))


def test_unsloth_casts_the_logits_to_the_checkpoints_dtype_on_an_fp16_board(tiny_cfg):
    """Unsloth's forward runs logits.to(config.torch_dtype): on a board without bf16 (fp16 compute) a bf16 checkpoint's
    logits get a bf16 copy and their gradient an fp16 one; an fp16 checkpoint's none. A config without a dtype is
    taken as bf16."""
    cfg = {**tiny_cfg.to_dict(), "vocab_size": 8192, "num_hidden_layers": 1}
    kw = dict(method="lora", micro_batch=1, seq_len=64, trainer="unsloth", precision="fp16-mixed")
    same = estimate_memory(EstimateRequest(model={**cfg, "torch_dtype": "float16"}, **kw)).peak_allocated_bytes
    cast = estimate_memory(EstimateRequest(model={**cfg, "torch_dtype": "bfloat16"}, **kw)).peak_allocated_bytes
    unknown = estimate_memory(EstimateRequest(model=cfg, **kw)).peak_allocated_bytes
    assert cast - same >= 0.9 * 64 * 8192 * 2 and unknown == cast  # one [tokens, vocab] 16-bit copy
