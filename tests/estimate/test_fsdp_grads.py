"""FSDP1 gradients for LoRA: flat params mixing frozen and trainable weights, and accumulation under no_sync."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory.memory import EstimateRequest, MemoryEstimate
from cheaptune.estimate.memory.sharding import FsdpRun, shard_estimate

GIB = 2**30
# Llama-2-7B's shape: 32 blocks, 4096 hidden, 32000 vocab, untied head
CFG = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "tie_word_embeddings": False}
TOTAL, TRAINABLE = 6_738_415_616, 4_194_304
ROOT = 2 * 32000 * 4096  # embeddings + lm_head: the root unit, no LoRA in it


def lora_bf16() -> MemoryEstimate:
    """A bf16-true LoRA step: 2 B per frozen weight, bf16 adapters, grads and moments."""
    b = {"weights": 2 * TOTAL, "trainable_weights": 2 * TRAINABLE, "gradients": 2 * TRAINABLE,
         "optimizer_state": 4 * TRAINABLE, "activations": GIB}
    alloc = sum(b.values())
    phases = {"forward": alloc - b["gradients"], "backward": alloc, "optimizer": alloc - GIB}
    return MemoryEstimate(alloc, alloc, alloc + GIB, b, phases, TRAINABLE, TOTAL, "simulated",
                          {"model": "x", "method": "lora", "lora_r": 8, "optimizer": "adamw"}, "1",
                          details={"peak_phase": "backward"})


def test_default_fsdp_shards_only_the_adapters_gradients():
    est = shard_estimate(lora_bf16(), 2, "fsdp", model_config=CFG)
    assert est.breakdown["gradients"] == TRAINABLE  # 2 B x trainable / 2 GPUs
    assert est.breakdown["fsdp_unsharded_grads"] < 2**20


@pytest.mark.parametrize("gpus", [2, 4])
def test_mixed_flat_units_give_every_block_element_a_gradient_shard(gpus):
    est = shard_estimate(lora_bf16(), gpus, "fsdp", model_config=CFG, fsdp_run=FsdpRun(mixed_units=True))
    assert est.breakdown["gradients"] == pytest.approx(2 * (TOTAL - ROOT) / gpus, rel=1e-3)
    assert est.breakdown["fsdp_unsharded_grads"] == pytest.approx(2 * (TOTAL - ROOT) / 32, rel=1e-3)  # one block
    assert est.phase_peaks["forward"] < est.phase_peaks["backward"]  # zero_grad: no gradients in the forward


@pytest.mark.parametrize("gpus", [2, 4])
def test_no_sync_accumulation_holds_unsharded_block_gradients_on_every_gpu(gpus):
    plain = shard_estimate(lora_bf16(), gpus, "fsdp", model_config=CFG)
    est = shard_estimate(lora_bf16(), gpus, "fsdp", model_config=CFG,
                         fsdp_run=FsdpRun(mixed_units=True, no_sync=True))
    held = 2 * (TOTAL - ROOT)  # not divided by the GPU count
    assert est.breakdown["gradients"] == pytest.approx(held, rel=1e-3)
    assert est.peak_allocated_bytes - plain.peak_allocated_bytes > 0.9 * held
    # accumulated gradients outlive the forward of the next micro-step; the optimizer step sees them synced
    assert est.phase_peaks["forward"] - plain.phase_peaks["forward"] > 0.9 * held
    assert est.phase_peaks["optimizer"] < est.phase_peaks["backward"] - held / 2


def test_no_sync_without_mixed_units_holds_only_the_adapters_gradients_unsharded():
    est = shard_estimate(lora_bf16(), 4, "fsdp", model_config=CFG, fsdp_run=FsdpRun(no_sync=True))
    assert est.breakdown["gradients"] == 2 * TRAINABLE


def test_fsdp_run_is_ignored_by_other_shardings():
    run = FsdpRun(mixed_units=True, no_sync=True)
    for s in ("ddp", "zero3"):
        assert shard_estimate(lora_bf16(), 2, s, model_config=CFG, fsdp_run=run).breakdown["gradients"] == \
            shard_estimate(lora_bf16(), 2, s, model_config=CFG).breakdown["gradients"]


def test_fsdp_run_comes_from_the_trainer_and_its_version(tiny_cfg):
    """litgpt before 0.5.11 ran FSDP1 with mixed flat units; every litgpt accumulates under no_backward_sync;
    cheaptune's own run is neither (no request field of its own)."""
    base = dict(model=tiny_cfg.to_dict(), method="lora", gpus=2, sharding="fsdp")
    assert FsdpRun.of(EstimateRequest(**base, trainer="litgpt==0.4.9")) == FsdpRun(mixed_units=True, no_sync=True)
    assert FsdpRun.of(EstimateRequest(**base, trainer="litgpt")) == FsdpRun(mixed_units=False, no_sync=True)
    assert FsdpRun.of(EstimateRequest(**base)) == FsdpRun()
