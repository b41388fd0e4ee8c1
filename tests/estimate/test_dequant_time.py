"""QLoRA dequantisation time: which weights a trainer holds in 4 bits and what each pass moves.

transformers' 4-bit loader keeps the LM head and the embeddings in 16 bits; litgpt's Fabric plugin quantizes every
Linear, its own head too, from fp16, so each pass also casts the fp16 copy to bf16 (profiles.yaml litgpt)."""

import pytest

from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import A100, LLAMA2_7B, LLAMA_3B, job

DQ = tp.load_table()["dequant"]
BYTES, CAST = DQ["bytes_per_param"]["value"], DQ["cast_bytes_per_param"]["value"]
MIXTRAL = tp.ModelShape(params=46_700_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False,
                        active_params=12_900_000_000)


def test_the_hf_loader_quantizes_neither_embedding_nor_head_litgpt_its_head_too():
    head = 32000 * 4096
    assert tp.quantized_params(LLAMA2_7B) == LLAMA2_7B.params - 2 * head  # untied: embedding and head in 16 bits
    assert tp.quantized_params(LLAMA2_7B, head_4bit=True) == LLAMA2_7B.params - head
    tied = 128256 * 3072
    assert tp.quantized_params(LLAMA_3B) == LLAMA_3B.params - tied
    assert tp.quantized_params(LLAMA_3B, head_4bit=True) == LLAMA_3B.params  # litgpt's own head, copied from the embedding


def test_every_moe_expert_is_dequantised_not_only_the_active_ones():
    assert tp.quantized_params(MIXTRAL) == MIXTRAL.params - 2 * 32000 * 4096
    assert tp.quantized_params(MIXTRAL) > MIXTRAL.matmul_params  # matmul_params counts the routed experts only


def test_dequant_part_is_passes_times_4bit_weights_times_bytes_over_bandwidth():
    plain = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1), A100).parts["dequant"]
    bw = 1555e9 * 0.80  # the test board has no measured bandwidth: steptime.yaml sustained_bandwidth.default
    assert plain == pytest.approx(2 * tp.quantized_params(LLAMA2_7B) * BYTES / bw)  # forward + backward
    ckpt = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1, ckpt=True), A100).parts["dequant"]
    assert ckpt == pytest.approx(plain * 3 / 2)  # the recompute dequantises again


def test_litgpt_dequantises_its_head_and_casts_each_fp16_copy_to_bf16():
    layout = tp.dequant_layout("litgpt")
    assert layout == {"head_4bit": True, "dequant_cast": True}
    assert tp.dequant_layout("hf") == tp.dequant_layout("cheaptune") == {"head_4bit": False, "dequant_cast": False}
    hf = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1), A100).parts["dequant"]
    lit = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1, **layout), A100).parts["dequant"]
    weights = tp.quantized_params(LLAMA2_7B, True) / tp.quantized_params(LLAMA2_7B)
    assert lit / hf == pytest.approx(weights * (BYTES + CAST) / BYTES)
    fp16 = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1, precision="fp16", **layout), A100).parts["dequant"]
    assert fp16 / hf == pytest.approx(weights)  # computing in fp16 the dequantised copy is used as it is: no cast


def test_lora_pays_no_dequant_whatever_the_trainer():
    st = tp.step_time(job(LLAMA2_7B, "lora", 512, 1, **tp.dequant_layout("litgpt")), A100)
    assert st.parts["dequant"] == 0
