"""GRPO step estimates: memory parts (reference copy, colocated vLLM share, KV refusal, server sizing) and time."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.catalog.models import resolve_model
from cheaptune.errors import BadInput
from cheaptune.estimate.grpo_setup import GrpoSetup, kv_bytes_per_token
from cheaptune.estimate.memory.grpo_memory import estimate_grpo_memory, fit_problem, kv_refusal
from cheaptune.estimate.memory.memory import EstimateRequest
from cheaptune.estimate.time.grpo_time import grpo_step_time

GIB = 2**30


@pytest.fixture
def tiny(tiny_cfg):
    return tiny_cfg.to_dict() if hasattr(tiny_cfg, "to_dict") else tiny_cfg


@pytest.fixture
def fake_step(monkeypatch, tiny):
    """The policy step without the simulator (test_colocated_parts... runs the real one)."""
    from types import SimpleNamespace

    from cheaptune.catalog.models import count_params
    from cheaptune.estimate.memory import grpo_memory

    step = SimpleNamespace(device_total_bytes=GIB, total_params=count_params(tiny), trainable_params=10_000)
    monkeypatch.setattr(grpo_memory, "_policy_step", lambda setup: step)
    return step


def _setup(model, **rl):
    rl.setdefault("prompt_len", 32)
    rl.setdefault("max_completion_length", 32)
    micro = rl.pop("micro_batch", 8)
    method = rl.pop("method", "full")
    return GrpoSetup.build(EstimateRequest(model=model, method=method, micro_batch=micro), **rl)


def test_kv_bytes_follow_the_config():
    cfg = resolve_model("meta-llama/Llama-3.1-8B").config
    assert kv_bytes_per_token(cfg) == 32 * 8 * 128 * 2 * 2  # layers x kv heads x head dim x K,V x bf16
    assert kv_bytes_per_token({**cfg, "num_key_value_heads": 32}) == 4 * kv_bytes_per_token(cfg)


def test_colocated_parts_sum_and_hold_the_vllm_share(tiny):
    h100 = resolve_gpu("H100")
    setup = _setup(tiny, vllm_gpu_memory_utilization=0.3)
    mem = estimate_grpo_memory(setup, h100.memory_bytes)
    assert sum(mem.parts.values()) == mem.total_bytes
    vllm = sum(v for k, v in mem.parts.items() if k.startswith("vllm"))
    assert vllm == int(0.3 * h100.memory_bytes)  # colocated vLLM takes its whole share
    assert mem.kv_needed_bytes == 8 * 64 * kv_bytes_per_token(tiny)
    assert "reference copy" not in mem.parts and not mem.generator_parts
    assert fit_problem(mem, setup, "H100", h100.memory_bytes) is None


def test_reference_copy_only_with_beta_and_trained_weights(tiny, fake_step):
    mem = estimate_grpo_memory(_setup(tiny, beta=0.04), 80 * GIB)
    assert mem.parts["reference copy"] == mem.train.total_params * 2
    lora = estimate_grpo_memory(_setup(tiny, beta=0.04, method="lora"), 80 * GIB)
    assert "reference copy" not in lora.parts and "adapters disabled" in lora.notes[0]


def test_kv_cache_that_cannot_hold_a_generation_call_is_refused(tiny, fake_step):
    t4 = resolve_gpu("T4")
    setup = _setup(tiny, vllm_gpu_memory_utilization=0.1)  # 1.5 GiB: vLLM's workspace leaves no KV room
    mem = estimate_grpo_memory(setup, t4.memory_bytes)
    line = kv_refusal(mem, setup, "T4", t4.memory_bytes)
    assert line and "vllm_gpu_memory_utilization" in line and "8 sequences" in line
    assert fit_problem(mem, setup, "T4", t4.memory_bytes) == line
    suggested = float(re.search(r"raise vllm_gpu_memory_utilization to ([0-9.]+)", line).group(1))
    enough = dataclasses.replace(setup, vllm_gpu_memory_utilization=suggested)  # what the line says to do works
    assert kv_refusal(estimate_grpo_memory(enough, t4.memory_bytes), enough, "T4", t4.memory_bytes) is None
    roomy = dataclasses.replace(setup, vllm_gpu_memory_utilization=0.9)
    assert estimate_grpo_memory(roomy, 200 * GIB).kv_capacity_bytes >= mem.kv_needed_bytes


def test_server_generator_is_sized_apart(tiny, fake_step):
    setup = _setup(tiny, generation_backend="vllm-server", server_gpus=2)
    mem = estimate_grpo_memory(setup, 80 * GIB, generator_memory_bytes=24 * GIB)
    assert not any(k.startswith("vllm") for k in mem.parts)
    assert mem.generator_total_bytes == int(0.9 * 24 * GIB)  # trl vllm-serve's 0.9 default
    colocate_share = dataclasses.replace(setup, vllm_gpu_memory_utilization=0.3)  # GRPOConfig's: colocate only
    assert estimate_grpo_memory(colocate_share, 80 * GIB, 24 * GIB).generator_total_bytes == mem.generator_total_bytes
    served = dataclasses.replace(setup, server_memory_utilization=0.5)
    assert estimate_grpo_memory(served, 80 * GIB, 24 * GIB).generator_total_bytes == int(0.5 * 24 * GIB)
    assert mem.engine_batch == 4  # 8 completions over 2 replicas


def test_vllm_without_a_gpu_is_one_line(tiny, fake_step):
    with pytest.raises(BadInput, match="needs the GPU"):
        estimate_grpo_memory(_setup(tiny))


def test_bad_settings_are_refused(tiny):
    with pytest.raises(BadInput, match="num_generations"):
        _setup(tiny, num_generations=1)
    with pytest.raises(BadInput, match="backend"):
        _setup(tiny, generation_backend="sglang")


def _time(**rl):
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    return grpo_step_time(_setup(spec.id, method="lora", **rl), spec.config, spec.params, 40_000_000,
                          resolve_gpu("H100"), at_cap=True)


def test_generation_dominates_and_grows_with_completion_length():
    short, long = _time(max_completion_length=128), _time(max_completion_length=1024)
    assert long.parts["decode"] > 6 * short.parts["decode"]
    assert 0 < short.generation_share < long.generation_share < 1
    assert long.step_seconds == pytest.approx(sum(long.parts.values()))


def test_decode_is_bandwidth_bound_at_small_batch_and_compute_bound_at_large():
    per_seq = {b: _time(micro_batch=b, num_generations=8 if b >= 8 else 2).parts["decode"] / b
               for b in (2, 8, 4096)}
    assert per_seq[8] < per_seq[2] / 3  # the weights are read once for the whole batch
    big = _time(micro_batch=4096, num_generations=8).parts["decode"]
    assert big > 3 * _time(micro_batch=8).parts["decode"]  # compute-bound: grows with the batch


def test_reference_and_sampling_correction_passes():
    base = _time()
    assert base.parts["reference_logprobs"] == 0 and base.parts["policy_logprobs"] > 0  # trl 1.16: IS on
    assert _time(beta=0.04).parts["reference_logprobs"] == pytest.approx(base.parts["policy_logprobs"])
    assert _time(generation_backend="transformers").parts["policy_logprobs"] == 0


def test_server_sync_and_expected_length():
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    setup = _setup(spec.id, generation_backend="vllm-server", max_completion_length=4096)
    capped = grpo_step_time(setup, spec.config, spec.params, 0, resolve_gpu("H100"))
    assert capped.parts["weight_sync"] > 0.01  # 16 GB of weights over NVLink
    short = dataclasses.replace(setup, expected_completion_length=512)
    assert grpo_step_time(short, spec.config, spec.params, 0, resolve_gpu("H100")).parts["decode"] < \
        capped.parts["decode"] / 4
    assert grpo_step_time(short, spec.config, spec.params, 0, resolve_gpu("H100"), at_cap=True) == capped
    with pytest.raises(BadInput, match="expected completion length"):
        dataclasses.replace(setup, expected_completion_length=5000)
