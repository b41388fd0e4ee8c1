"""MoE experts in fp16 or fp32 simulate (transformers' fallback kernel) instead of failing into the formula.

torch's grouped_mm meta kernel takes only bf16, so these steps raised (and printed torch's traceback, issue 33);
estimate/memory/moe_dispatch.py routes them to the kernel transformers itself runs on boards without grouped_mm.
"""

from __future__ import annotations

import contextlib

import pytest

from cheaptune.estimate.memory import simulate as sim
from tests.estimate.conftest import request
from tests.estimate.test_quiet import tiny_mixtral


@pytest.mark.parametrize(("method", "precision"), [("lora", "fp16-mixed"), ("full", "bf16-mixed"), ("full", "fp32")])
def test_non_bf16_experts_simulate_byte_exact_against_a_real_cpu_step(method, precision):
    """Fake tensors give the bytes a real CPU step of the same model gives (both through the fallback)."""
    cfg = tiny_mixtral()
    req = request(cfg, method=method, precision=precision, micro_batch=2, seq_len=32)
    fake = sim.simulate(req, cfg, loss_kernels="cpu")
    real = sim.simulate(req, cfg, real=True, loss_kernels="cpu")
    assert fake.phase_peaks == real.phase_peaks
    assert fake.phase_peaks["backward"] > fake.static.get("weights", 0)


def test_full_fp32_fallback_matches_torch_grouped_mm_on_real_tensors(monkeypatch):
    """Where torch's own kernel can run (real CPU tensors, fp32), it holds the same bytes as the fallback."""
    cfg = tiny_mixtral()
    req = request(cfg, method="full", precision="fp32", micro_batch=2, seq_len=32)
    routed = sim.simulate(req, cfg, real=True, loss_kernels="cpu")
    monkeypatch.setattr(sim, "grouped_mm_bf16_only", contextlib.nullcontext)
    torch_kernel = sim.simulate(req, cfg, real=True, loss_kernels="cpu")
    assert routed.phase_peaks == torch_kernel.phase_peaks


def test_bf16_experts_keep_torch_grouped_mm(monkeypatch):
    """bf16 is untouched: the same bytes with the routing on or off (off still simulates in bf16)."""
    import transformers.integrations.moe as moe

    original = moe._can_use_grouped_mm
    cfg = tiny_mixtral()
    req = request(cfg, method="lora", precision="bf16-true", micro_batch=1, seq_len=32)
    routed = sim.simulate(req, cfg)
    assert moe._can_use_grouped_mm is original  # put back after the simulation
    monkeypatch.setattr(sim, "grouped_mm_bf16_only", contextlib.nullcontext)
    assert sim.simulate(req, cfg).phase_peaks == routed.phase_peaks
