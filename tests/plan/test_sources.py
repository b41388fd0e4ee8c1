"""The real fit wrappers report the peak at the micro-batch the plan runs, not at the largest that fits."""

from __future__ import annotations

from types import SimpleNamespace

from cheaptune.estimate.memory import memory, sharding
from cheaptune.plan.sources import real_fit, real_multi_fit

GIB = 1024**3
SPEC = SimpleNamespace(id="fake/model", config={"hidden_size": 64, "num_hidden_layers": 2}, params=1000)


def fake_estimate(req):
    """Affine in the micro-batch, as the real estimator is at a fixed sequence length; less per GPU on more."""
    total = (10 * GIB) // req.gpus + req.micro_batch * GIB
    return SimpleNamespace(device_total_bytes=total, trainable_params=1, total_params=2, basis="fake")


def test_single_gpu_peak_is_at_the_planned_micro_batch(monkeypatch):
    seen = []

    def estimate(req):
        seen.append(req.micro_batch)
        return fake_estimate(req)

    monkeypatch.setattr(memory, "estimate_memory", estimate)
    # 72 GiB usable: 10 + b GiB fits up to b = 62, capped at 16; one step of 16 sequences
    out = real_fit(SPEC, 2048, 0.10, 16, 16, effective_batch=16)("lora", 80 * GIB, "bf16-mixed")
    assert out.fits and out.micro_batch == 16 and out.peak_bytes == 26 * GIB
    # 16.2 GiB usable: up to 6 fits; 3 accumulation steps of 6 make 16 (+2): the peak is the estimate at 6
    out = real_fit(SPEC, 2048, 0.10, 16, 16, effective_batch=16)("lora", 18 * GIB, "bf16-mixed")
    assert out.fits and out.micro_batch == 6 and out.peak_bytes == 16 * GIB
    assert 7 not in seen  # a micro-batch the plan never runs is never estimated
    old = real_fit(SPEC, 2048, 0.10, 16, 16)("lora", 19 * GIB, "bf16-mixed")  # without the effective batch: the largest
    assert old.micro_batch == 7 and old.peak_bytes == 17 * GIB


def test_multi_gpu_peak_is_at_the_planned_per_gpu_micro_batch(monkeypatch):
    def shard(single, gpus, kind, offload, cfg, run):
        assert single.gpus == 1 and kind == "fsdp" and gpus == 4
        return SimpleNamespace(device_total_bytes=(10 * GIB) // gpus + single.micro_batch * GIB,
                               trainable_params=1, total_params=2, basis="fake+fsdp")

    def estimate(req):
        assert req.gpus == 1 and req.sharding is None
        return SimpleNamespace(micro_batch=req.micro_batch, gpus=req.gpus)

    monkeypatch.setattr(memory, "estimate_memory", estimate)
    monkeypatch.setattr(sharding, "shard_estimate", shard)
    # per GPU 4 sequences (planned 4, 2 or 1); 5.85 GiB usable: 2.5 + b GiB fits b <= 3, so 2 steps of 2
    out = real_multi_fit(SPEC, 2048, 0.10, 16, 16)("full", int(6.5 * GIB), 4, "fsdp", False, "bf16-true")
    assert out.fits and not out.grad_ckpt and out.micro_batch == 2
    assert out.peak_bytes == (10 * GIB) // 4 + 2 * GIB
