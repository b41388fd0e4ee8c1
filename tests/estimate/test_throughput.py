"""Throughput: FLOP counting rules, MFU table, and the published measurements the table was derived from."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate import throughput as tp

LLAMA_8B = tp.ModelShape(params=8_030_000_000, hidden=4096, layers=32, vocab=128256, tied_embeddings=False)
LLAMA_3B = tp.ModelShape(params=3_210_000_000, hidden=3072, layers=28, vocab=128256, tied_embeddings=True)
LLAMA2_7B = tp.ModelShape(params=6_738_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False)


def gpu(**kw):
    base = dict(name="X", arch="ampere", tier="datacenter", bf16=True, bf16_tflops=312.0, fp16_tflops=312.0,
                fp32_tflops=19.5, mem_bw_gbs=1555)
    base.update(kw)
    return SimpleNamespace(**base)


A100 = gpu(name="A100")
RTX4090 = gpu(name="RTX4090", arch="ada", tier="consumer", bf16_tflops=165.2, fp16_tflops=165.2, mem_bw_gbs=1008)


def test_lora_skips_weight_gradients_and_full_does_not():
    lora = tp.flops_per_token(LLAMA_8B, "lora", 2048, grad_ckpt=False)
    full = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=False)
    assert lora.backward_weights == 0
    assert full.backward_weights == pytest.approx(2 * LLAMA_8B.matmul_params)
    assert full.total / lora.total == pytest.approx(1.5, rel=0.02)  # 6N vs 4N


def test_checkpointing_adds_one_forward():
    plain = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=False)
    ckpt = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=True)
    assert ckpt.total - plain.total == pytest.approx(plain.forward)


def test_attention_grows_with_sequence_and_embedding_lookup_is_not_a_matmul():
    short = tp.flops_per_token(LLAMA_8B, "lora", 512, False).forward
    long = tp.flops_per_token(LLAMA_8B, "lora", 8192, False).forward
    assert long > short
    assert LLAMA_8B.matmul_params == LLAMA_8B.params - 128256 * 4096
    assert LLAMA_3B.matmul_params == LLAMA_3B.params  # tied: the embedding is also the LM head


def test_mfu_table_reproduces_its_sources_within_compile_factor():
    """The 4090 LoRA row (3083 tok/s compiled) divided by the 1.27 compile speed-up, within 5%."""
    t = tp.estimate_throughput(LLAMA_8B, RTX4090, "lora", 2048, micro_batch=2, grad_ckpt=False)
    assert t.tokens_per_s == pytest.approx(3083 / 1.27, rel=0.05)
    full = tp.estimate_throughput(LLAMA_3B, A100, "full", 4096, micro_batch=2, grad_ckpt=False)
    assert full.tokens_per_s == pytest.approx(7075, rel=0.05)  # torchtune ladder '+ packing' row


def test_qlora_is_slower_than_lora_like_litgpt_measured():
    lora = tp.estimate_throughput(LLAMA2_7B, A100, "lora", 512, micro_batch=1, grad_ckpt=False)
    qlora = tp.estimate_throughput(LLAMA2_7B, A100, "qlora", 512, micro_batch=1, grad_ckpt=False)
    assert 1.3 <= lora.tokens_per_s / qlora.tokens_per_s <= 2.0  # LitGPT: 1.56x (7B), 2.0x (13B)
    assert qlora.step_overhead_s > 0 and lora.step_overhead_s == 0


def test_no_bf16_gpu_uses_fp16_peak_and_classes():
    t4 = gpu(name="T4", arch="turing", bf16=False, bf16_tflops=None, fp16_tflops=65.0, fp32_tflops=8.1)
    assert tp.peak_flops(t4) == (65e12, "fp16")
    assert tp.peak_flops(t4, "fp32") == (8.1e12, "fp32")
    assert tp.gpu_class(gpu(arch="hopper")) == "hopper"
    assert tp.gpu_class(RTX4090) == "consumer"
    assert tp.gpu_class(A100) == "datacenter"


def test_hopper_is_faster_than_ampere_per_gpu():
    h100 = gpu(name="H100", arch="hopper", bf16_tflops=989.4, fp16_tflops=989.4, mem_bw_gbs=3350)
    a = tp.estimate_throughput(LLAMA_8B, A100, "lora", 2048, 4, False).tokens_per_s
    h = tp.estimate_throughput(LLAMA_8B, h100, "lora", 2048, 4, False).tokens_per_s
    assert 1.5 < h / a < 3.5


def test_shape_from_config_and_bad_config():
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000}
    s = tp.ModelShape.from_config(cfg, 6_738_000_000)
    assert s.layers == 32 and not s.tied_embeddings
    moe = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "intermediate_size": 14336}
    assert tp.ModelShape.from_config(moe, 46_700_000_000).active_params < 15e9
    with pytest.raises(BadInput):
        tp.ModelShape.from_config({"vocab_size": 3}, 10)


def test_unknown_method_is_bad_input():
    with pytest.raises(BadInput, match="method"):
        tp.estimate_throughput(LLAMA_8B, A100, "magic", 2048, 1, False)
