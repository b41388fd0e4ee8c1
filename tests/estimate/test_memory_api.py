"""Public API: validation, cache without torch, fit_micro_batch, analytic fallback, LoRA targets."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory, fit_micro_batch
from cheaptune.estimate.policy import DEFAULT_PRECISION, METHODS


def _req(cfg, **kw):
    return EstimateRequest(model=cfg.to_dict(), **{"method": "lora", "micro_batch": 2, "seq_len": 64, **kw})


@pytest.mark.parametrize("kw, word", [
    (dict(micro_batch=0), "--micro-batch"), (dict(seq_len=100_000), "--allow-long-context"),
    (dict(lora_r=0), "--lora-r"), (dict(gpus=0), "--gpus"), (dict(method="magic"), "--method"),
    (dict(gpus=2, sharding="zero9"), "--sharding"), (dict(gpus=2, offload=True), "--offload"),
    (dict(quant="nf4"), "--method qlora"),
])
def test_bad_input_is_one_line(tiny_cfg, kw, word):
    with pytest.raises(BadInput) as exc:
        estimate_memory(_req(tiny_cfg, **kw))
    assert word in str(exc.value) and "\n" not in str(exc.value)


def test_every_method_has_a_default_precision_and_estimates(tiny_cfg):
    assert set(DEFAULT_PRECISION) == set(METHODS)
    peaks = {m: estimate_memory(_req(tiny_cfg, method=m)).peak_allocated_bytes for m in METHODS}
    assert all(e.basis == "simulated" for e in [estimate_memory(_req(tiny_cfg, method="ia3"))])
    assert peaks["full"] > peaks["lora"] > peaks["qlora"]


def test_warm_call_reads_cache_without_torch(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path))
    cold = estimate_memory(_req(tiny_cfg))
    script = (
        "import json,sys; from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory\n"
        f"e = estimate_memory(EstimateRequest(model=json.loads({json.dumps(json.dumps(tiny_cfg.to_dict()))}),"
        " method='lora', micro_batch=2, seq_len=64))\n"
        "print(json.dumps([e.peak_allocated_bytes, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "CHEAPTUNE_HOME": str(tmp_path)})
    peak, torch_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert peak == cold.peak_allocated_bytes and torch_loaded is False


def test_overheads_order_and_json_shape(tiny_cfg):
    e = estimate_memory(_req(tiny_cfg))
    assert e.peak_allocated_bytes < e.peak_reserved_bytes < e.device_total_bytes
    assert set(e.phase_peaks) == {"forward", "backward", "optimizer"}
    assert e.peak_allocated_bytes == max(e.phase_peaks.values())
    assert sum(e.breakdown.values()) >= e.device_total_bytes * 0.99
    assert json.loads(json.dumps(dataclasses.asdict(e)))["inputs"]["precision"] == "bf16-mixed"


def test_activations_affine_and_fit_micro_batch(tiny_cfg):
    totals = [estimate_memory(_req(tiny_cfg, micro_batch=b)).device_total_bytes for b in (1, 2, 3, 4)]
    # affine in micro-batch (up to the 512-byte allocator rounding)
    assert totals[3] - totals[2] == pytest.approx(totals[2] - totals[1], rel=0.01)
    assert totals[1] > totals[0]
    gpu = totals[0] + 6 * (totals[1] - totals[0])
    fit = fit_micro_batch(_req(tiny_cfg), gpu, headroom=0.0)
    assert fit is not None and not fit.grad_ckpt
    assert fit.estimate.device_total_bytes <= gpu
    over = estimate_memory(_req(tiny_cfg, micro_batch=fit.micro_batch + 1))
    assert over.device_total_bytes > gpu
    bigger = fit_micro_batch(_req(tiny_cfg), gpu * 2, headroom=0.0)
    assert bigger.micro_batch >= fit.micro_batch  # monotonic in memory
    assert fit_micro_batch(_req(tiny_cfg), 1000) is None


def test_custom_model_falls_back_to_analytic_erring_high(tiny_cfg):
    cfg = tiny_cfg.to_dict() | {"model_type": "my_custom_arch", "auto_map": {"AutoModelForCausalLM": "x.Y"}}
    analytic = estimate_memory(EstimateRequest(model=cfg, method="full", micro_batch=2, seq_len=64))
    simulated = estimate_memory(EstimateRequest(model=tiny_cfg.to_dict(), method="full", micro_batch=2, seq_len=64))
    assert analytic.basis == "analytic" and simulated.basis == "simulated"
    assert analytic.peak_allocated_bytes >= simulated.peak_allocated_bytes


def test_lora_target_presets_follow_the_architecture(tiny_cfg):
    from transformers import FalconConfig, Phi3Config

    from cheaptune.estimate.memory.targets import resolve_targets

    assert resolve_targets(tiny_cfg, "qv") == ["q_proj", "v_proj"]
    assert resolve_targets(tiny_cfg, "mlp,lm_head") == ["down_proj", "gate_proj", "lm_head", "up_proj"]
    phi3 = Phi3Config(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1,
                      vocab_size=128, pad_token_id=0)
    assert resolve_targets(phi3, "qv") == ["qkv_proj"]
    falcon = FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, vocab_size=128)
    assert "query_key_value" in resolve_targets(falcon, "attention")
    with pytest.raises(BadInput, match="valid: .*q_proj"):
        resolve_targets(tiny_cfg, "qproj")


def test_several_gpus_shard_the_one_gpu_estimate(tiny_cfg):
    one = estimate_memory(_req(tiny_cfg, method="full"))
    ddp = estimate_memory(_req(tiny_cfg, method="full", gpus=4))
    z3 = estimate_memory(_req(tiny_cfg, method="full", gpus=4, sharding="zero3"))
    off = estimate_memory(_req(tiny_cfg, method="full", gpus=4, sharding="zero3", offload=True))
    assert ddp.inputs["sharding"] == "ddp" and ddp.breakdown["ddp_buckets"] > 0
    assert ddp.breakdown["optimizer_state"] == one.breakdown["optimizer_state"]  # replicated
    assert ddp.device_total_bytes > one.device_total_bytes  # the same state plus buffers
    assert z3.breakdown["optimizer_state"] < one.breakdown["optimizer_state"]
    assert off.device_total_bytes < z3.device_total_bytes
    assert (z3.inputs["gpus"], z3.inputs["offload"], off.inputs["offload"]) == (4, False, True)


def test_qlora_estimate_leaves_bitsandbytes_usable(tiny_cfg):
    """The simulation's fake code table must not leak into a real QLoRA run later in the same process."""
    import bitsandbytes.functional as bF
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    estimate_memory(_req(tiny_cfg, method="qlora", seq_len=32))
    assert not isinstance(bF.name2qmap.get("dynamic"), FakeTensor)
    x = torch.randn(256)
    q, state = bF.quantize_blockwise(x)
    assert torch.allclose(bF.dequantize_blockwise(q, state), x, atol=0.05)


def test_hf_loss_holds_full_logits_trl_does_not(tiny_cfg):
    """A plain transformers Trainer keeps fp32 logits over the vocabulary; trl's chunked head does not."""
    cfg = tiny_cfg.to_dict() | {"vocab_size": 8192}
    trl = estimate_memory(EstimateRequest(model=cfg, method="lora", micro_batch=2, seq_len=128))
    hf = estimate_memory(EstimateRequest(model=cfg, method="lora", micro_batch=2, seq_len=128, loss="hf"))
    logits_fp32 = 2 * 128 * 8192 * 4  # micro-batch 2, seq 128, fp32
    assert hf.breakdown["logits_loss"] >= logits_fp32 > 10 * trl.breakdown["logits_loss"]
    assert hf.peak_allocated_bytes > trl.peak_allocated_bytes
    with pytest.raises(BadInput, match="--loss"):
        estimate_memory(_req(tiny_cfg, loss="liger"))


@pytest.mark.parametrize("model", ["tiiuae/falcon-7b", "mistralai/Mixtral-8x7B-v0.1"])
def test_qlora_where_bitsandbytes_leaves_a_16bit_base_is_refused(model):
    """transformers' 4-bit loader skips FalconLinear and fused MoE experts: that would be a 16-bit 'QLoRA'
    (falcon-7b used to estimate exactly as LoRA). One clear line instead."""
    with pytest.raises(BadInput, match="16 bits .*--method lora") as err:
        estimate_memory(EstimateRequest(model=model, method="qlora", seq_len=256))
    assert "\n" not in str(err.value)


def test_qlora_weights_are_about_half_a_byte_per_quantized_parameter():
    """Llama-2-7B: 6.5e9 block weights in NF4 (+ double-quantized scales), embeddings and head in bf16."""
    est = estimate_memory(EstimateRequest(model="meta-llama/Llama-2-7b-hf", method="qlora", seq_len=256))
    embed = 2 * 32000 * 4096
    blocks = est.total_params - embed
    per_quantized = (est.breakdown["weights"] - 2 * embed) / blocks
    assert 0.5 <= per_quantized <= 0.6, per_quantized
