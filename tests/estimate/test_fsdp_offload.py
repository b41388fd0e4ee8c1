"""FSDP with CPU offload of a QLoRA model: what stays on the GPU (bnb quant state, the gathered root unit)."""

from __future__ import annotations

import pytest

from cheaptune.estimate.memory.memory import MemoryEstimate
from cheaptune.estimate.memory.sharding import shard_estimate

GIB = 2**30
# Llama-2-70B's shape: 80 blocks, 8192 hidden, 32000 vocab, untied head
CFG = {"hidden_size": 8192, "num_hidden_layers": 80, "vocab_size": 32000, "tie_word_embeddings": False}
BASE, TRAINABLE = 68_976_648_192, 103_546_880
ROOT = 2 * 32000 * 8192  # embeddings + lm_head, bf16
QUANTIZED = BASE - ROOT
QUANT_STATE = QUANTIZED / 64 + QUANTIZED / 64 / 256 * 4  # nf4-dq: uint8 absmax + fp32 absmax of absmax


def qlora(quant: str) -> MemoryEstimate:
    """A QLoRA step whose weights are 4-bit blocks + bf16 root + the quant state."""
    qs = QUANT_STATE if quant == "nf4-dq" else QUANTIZED / 64 * 4
    b = {"weights": int(QUANTIZED / 2 + 2 * ROOT + qs), "trainable_weights": 2 * TRAINABLE,
         "gradients": 2 * TRAINABLE, "optimizer_state": 4 * TRAINABLE, "activations": 5 * GIB}
    alloc = sum(b.values())
    phases = {"forward": alloc - b["gradients"], "backward": alloc, "optimizer": alloc - 5 * GIB}
    return MemoryEstimate(alloc, alloc, alloc + GIB, b, phases, TRAINABLE, BASE + TRAINABLE, "simulated",
                          {"model": "x", "method": "qlora", "quant": quant, "lora_r": 8, "optimizer": "adamw"}, "1",
                          details={"peak_phase": "backward"})


def test_offload_keeps_the_whole_quant_state_and_root_unit_on_every_gpu():
    est = shard_estimate(qlora("nf4-dq"), 2, "fsdp", offload=True, model_config=CFG)
    assert est.breakdown["weights"] == pytest.approx(QUANT_STATE, rel=1e-3)  # not offloaded, not sharded
    assert est.breakdown["fsdp_root_unit"] == pytest.approx(2 * ROOT, rel=1e-3)  # the local shard is on the host
    assert est.details["host_offload_bytes_per_gpu"] == pytest.approx(
        (QUANTIZED / 2 + 2 * ROOT) / 2 + 4 * TRAINABLE, rel=1e-3)


@pytest.mark.parametrize("gpus", [2, 8])
def test_sharding_without_offload_splits_the_blocks_but_not_their_quant_state(gpus):
    one = qlora("nf4")
    est = shard_estimate(one, gpus, "fsdp", model_config=CFG)
    qs = QUANTIZED / 64 * 4
    assert est.breakdown["weights"] == pytest.approx((one.breakdown["weights"] - qs) / gpus + qs, rel=1e-3)
    assert est.breakdown["fsdp_root_unit"] == pytest.approx(2 * ROOT * (1 - 1 / gpus), rel=1e-3)


def test_lora_on_a_16_bit_base_has_no_quant_state():
    one = qlora("nf4-dq")
    lora = MemoryEstimate(**{**one.__dict__, "inputs": {**one.inputs, "method": "lora", "quant": None}})
    assert shard_estimate(lora, 2, "fsdp", offload=True, model_config=CFG).breakdown.get("weights", 0) == 0
