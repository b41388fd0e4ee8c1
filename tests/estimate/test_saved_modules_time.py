"""Whole modules an adapter trains in place (peft modules_to_save: embed_tokens, lm_head).

peft runs the trained copy instead of the frozen module, so such a module adds no forward, no input gradient and no
recompute: only its weight gradient (linear modules; an embedding is a lookup) and its AdamW step."""

import pytest

from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import A100, LLAMA_8B, job

HEAD = LLAMA_8B.vocab * LLAMA_8B.hidden
LORA = 42_000_000


def test_a_saved_head_adds_its_weight_gradient_only_and_an_embedding_no_flops():
    base = tp.flops_per_token(LLAMA_8B, "qlora", 1024, True, LORA)
    saved = tp.flops_per_token(LLAMA_8B, "qlora", 1024, True, LORA, saved_matmul_params=HEAD)
    assert saved.total - base.total == pytest.approx(2 * HEAD)
    assert (saved.forward, saved.backward_activations, saved.recompute) == (
        base.forward, base.backward_activations, base.recompute)
    # counted as adapter weights, the two modules would add a forward, an input gradient and a recompute too
    as_adapters = tp.flops_per_token(LLAMA_8B, "qlora", 1024, True, LORA + 2 * HEAD)
    assert as_adapters.total - base.total == pytest.approx(4 * 2 * 2 * HEAD)


def test_saved_modules_take_an_adamw_step_like_any_trained_weight():
    plain = tp.step_time(job(LLAMA_8B, "qlora", 1024, 2, ckpt=True, trainable=LORA), A100)
    saved = tp.step_time(job(LLAMA_8B, "qlora", 1024, 2, ckpt=True, trainable=LORA, saved_params=2 * HEAD,
                             saved_matmul_params=HEAD), A100)
    assert saved.parts["optimizer"] == pytest.approx(plain.parts["optimizer"] * (LORA + 2 * HEAD) / LORA)
    assert saved.parts["compute"] > plain.parts["compute"]  # the head's weight gradient
    assert saved.flops_per_token - plain.flops_per_token == pytest.approx(2 * HEAD)
