"""The real fit wrappers report the peak at the micro-batch the plan runs, not at the largest that fits."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from cheaptune.estimate import memory, sharding
from cheaptune.plan.sources import real_fit, real_multi_fit

GIB = 1024**3
SPEC = SimpleNamespace(id="fake/model", config={"hidden_size": 64, "num_hidden_layers": 2})


def fake_estimate(req):
    """Affine in the micro-batch, as the real estimator is at a fixed sequence length; less per GPU on more."""
    total = (10 * GIB) // req.gpus + req.micro_batch * GIB
    return SimpleNamespace(device_total_bytes=total, trainable_params=1, total_params=2, basis="fake")


def test_single_gpu_peak_is_at_the_planned_micro_batch(monkeypatch):
    seen = []

    def fit_mb(req, mem, headroom, max_micro_batch):
        seen.append(max_micro_batch)
        return memory.FitResult(7, False, fake_estimate(dataclasses.replace(req, micro_batch=7)))

    monkeypatch.setattr(memory, "estimate_memory", fake_estimate)
    monkeypatch.setattr(memory, "fit_micro_batch", fit_mb)
    out = real_fit(SPEC, 2048, 0.10, 16, 16, effective_batch=16)("lora", 80 * GIB, "bf16-mixed")
    # the largest fit is 7, so 3 accumulation steps of 6 make 16 (+2): the peak is the estimate at 6, not 7
    assert out.fits and out.micro_batch == 6 and out.peak_bytes == 16 * GIB
    assert seen == [16]
    old = real_fit(SPEC, 2048, 0.10, 16, 16)("lora", 80 * GIB, "bf16-mixed")  # without the effective batch: the largest
    assert old.micro_batch == 7 and old.peak_bytes == 17 * GIB


def test_multi_gpu_peak_is_at_the_planned_per_gpu_micro_batch(monkeypatch):
    def fit_sharded(req, mem, gpus, shard, offload, headroom, cap, cfg):
        assert req.gpus == 1 and req.sharding is None and cap == 4  # 16 sequences over 4 GPUs
        return memory.FitResult(3, True, fake_estimate(dataclasses.replace(req, micro_batch=3, gpus=gpus)))

    monkeypatch.setattr(memory, "estimate_memory", fake_estimate)
    monkeypatch.setattr(sharding, "fit_micro_batch_sharded", fit_sharded)
    out = real_multi_fit(SPEC, 2048, 0.10, 16, 16)("full", 80 * GIB, 4, "fsdp", False, "bf16-true")
    # per GPU 4 sequences; the largest fit 3 means 2 steps of 2
    assert out.fits and out.grad_ckpt and out.micro_batch == 2
    assert out.peak_bytes == (10 * GIB) // 4 + 2 * GIB
