"""Per-GPU memory under ddp / fsdp / zero2 / zero3 from a single-GPU breakdown."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.memory import MemoryEstimate
from cheaptune.estimate.memory.sharding import shard_estimate

GIB = 2**30
# A Llama-7B-like config: 32 layers, 4096 hidden, 32000 vocab.
CFG = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "tie_word_embeddings": False}


def full_ft(total=6_700_000_000) -> MemoryEstimate:
    """A full fine-tune in bf16-true: 2 B weights, 2 B grads, 4 B AdamW state per param."""
    b = {"trainable_weights": 2 * total, "gradients": 2 * total, "optimizer_state": 4 * total,
         "activations": 6 * GIB, "logits_loss": GIB, "kernel_workspaces": 64 * 2**20}
    alloc = sum(b.values())
    b.update(allocator_slack=GIB, cuda_context=GIB)
    return MemoryEstimate(alloc, alloc + GIB, alloc + 2 * GIB, b,
                          {"forward": alloc - 2 * total, "backward": alloc, "optimizer": alloc - 6 * GIB},
                          total, total, "simulated", {"model": "x", "method": "full", "optimizer": "adamw"}, "1")


def lora(total=6_700_000_000, trainable=20_000_000) -> MemoryEstimate:
    b = {"weights": 2 * total, "trainable_weights": 4 * trainable, "gradients": 4 * trainable,
         "optimizer_state": 8 * trainable, "activations": 6 * GIB}
    alloc = sum(b.values())
    return MemoryEstimate(alloc, alloc, alloc + GIB, b, {"backward": alloc}, trainable, total, "simulated",
                          {"model": "x", "method": "lora", "lora_r": 16, "optimizer": "adamw"}, "1")


def test_one_gpu_is_the_single_estimate():
    single = full_ft()
    assert shard_estimate(single, 1, "zero3", model_config=CFG) is single


def test_ddp_replicates_everything_and_adds_a_bucket_copy_of_the_gradients():
    single = full_ft()
    est = shard_estimate(single, 8, "ddp", model_config=CFG)
    for k in ("trainable_weights", "gradients", "optimizer_state", "activations"):
        assert est.breakdown[k] == single.breakdown[k]
    assert est.breakdown["ddp_buckets"] >= single.breakdown["gradients"]
    assert est.peak_allocated_bytes > single.peak_allocated_bytes
    assert est.device_total_bytes > single.device_total_bytes


@pytest.mark.parametrize("n", [2, 4, 8])
def test_zero3_and_fsdp_shard_weights_about_one_over_n(n):
    single = full_ft()
    for s in ("zero3", "fsdp"):
        est = shard_estimate(single, n, s, model_config=CFG)
        assert est.breakdown["trainable_weights"] == pytest.approx(single.breakdown["trainable_weights"] / n, rel=1e-6)
        assert est.breakdown["activations"] == single.breakdown["activations"]  # per GPU, unchanged
        # DeepSpeed's 12 B/param Adam state outweighs torch's bf16 moments until it is split 4 ways
        if s == "fsdp" or n >= 4:
            assert est.peak_allocated_bytes < single.peak_allocated_bytes


def test_zero2_keeps_weights_and_shards_gradients_and_optimizer():
    single = full_ft()
    est = shard_estimate(single, 4, "zero2", model_config=CFG)
    assert est.breakdown["trainable_weights"] == single.breakdown["trainable_weights"]
    assert est.breakdown["gradients"] == pytest.approx(single.breakdown["gradients"] / 4, rel=1e-6)
    # DeepSpeed Adam holds 12 B/param (fp32 master + moments) partitioned, not torch's bf16 moments
    assert est.breakdown["optimizer_state"] == pytest.approx(12 * single.trainable_params / 4, rel=1e-6)


def test_more_gpus_never_need_more_memory_per_gpu_under_full_sharding():
    totals = [shard_estimate(full_ft(), n, "zero3", model_config=CFG).peak_allocated_bytes for n in (2, 4, 8, 16)]
    assert totals == sorted(totals, reverse=True)


def test_fsdp_offload_moves_model_state_off_the_gpu():
    single = full_ft()
    on = shard_estimate(single, 2, "fsdp", model_config=CFG)
    off = shard_estimate(single, 2, "fsdp", offload=True, model_config=CFG)
    assert "optimizer_state" not in off.breakdown and "trainable_weights" not in off.breakdown
    assert off.details["host_offload_bytes_per_gpu"] == pytest.approx(
        sum(on.breakdown[k] for k in ("trainable_weights", "gradients", "optimizer_state")), rel=1e-6)
    assert off.breakdown["fsdp_gathered_units"] > 0  # computing a unit still needs it on the GPU
    assert off.device_total_bytes < on.device_total_bytes


def test_zero3_keeps_small_lora_matrices_whole():
    """r=16 x 4096 = 65536 elements < stage3_param_persistence_threshold (1e5): not partitioned."""
    single = lora()
    est = shard_estimate(single, 4, "zero3", model_config=CFG)
    assert est.breakdown["trainable_weights"] == single.breakdown["trainable_weights"]
    assert est.breakdown["weights"] == pytest.approx(single.breakdown["weights"] / 4, rel=1e-6)


def test_bad_input_is_one_line():
    for kwargs in ({"sharding": "zero9"}, {"sharding": "ddp", "offload": True}, {"gpus": 0}):
        args = {"gpus": 2, "model_config": CFG, **kwargs}
        with pytest.raises(BadInput) as err:
            shard_estimate(full_ft(), **args)
        assert "\n" not in str(err.value)


def test_real_simulated_estimate_of_the_tiny_model(tiny_model_dir):
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

    single = estimate_memory(EstimateRequest(model=str(tiny_model_dir), method="full", seq_len=64,
                                             precision="bf16-true"))
    import json

    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    ddp = shard_estimate(single, 2, "ddp", model_config=cfg)
    z3 = shard_estimate(single, 2, "zero3", model_config=cfg)
    assert ddp.breakdown["ddp_buckets"] >= single.breakdown.get("gradients", 0)
    assert z3.breakdown["trainable_weights"] < single.breakdown["trainable_weights"]
    assert z3.inputs["gpus"] == 2 and z3.basis.endswith("+zero3")


def test_sharded_fit_finds_the_largest_per_gpu_micro_batch(tiny_model_dir):
    import dataclasses
    import json

    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory, fit_micro_batch_sharded

    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    req = EstimateRequest(model=str(tiny_model_dir), method="full", seq_len=64, precision="bf16-true")

    def per_gpu(b):
        return shard_estimate(estimate_memory(dataclasses.replace(req, micro_batch=b)), 2, "zero3",
                              model_config=cfg).device_total_bytes

    budget = (per_gpu(3) + per_gpu(4)) // 2  # 3 fits, 4 does not
    fit = fit_micro_batch_sharded(req, budget, 2, "zero3", headroom=0.0, max_micro_batch=8, model_config=cfg)
    assert fit is not None and (fit.micro_batch, fit.grad_ckpt) == (3, False)
    assert fit.estimate.inputs["sharding"] == "zero3" and fit.estimate.device_total_bytes <= budget
    assert fit_micro_batch_sharded(req, per_gpu(1) // 2, 2, "zero3", headroom=0.0, model_config=cfg) is None


def test_forward_peak_keeps_activations_when_offloading():
    """The forward holds no gradients, so sharding them must not be credited to it (70B-style case)."""
    total, act = 1_000_000_000, 30 * GIB
    b = {"trainable_weights": 2 * total, "gradients": 2 * total, "optimizer_state": 4 * total}
    fwd = 2 * total + 4 * total + act  # weights + optimizer state + activations; no gradients yet
    opt = 8 * total
    single = MemoryEstimate(opt, opt, opt + GIB, dict(b), {"forward": fwd, "backward": fwd, "optimizer": opt},
                            total, total, "simulated", {"model": "x", "method": "full", "optimizer": "adamw"}, "1",
                            details={"peak_phase": "optimizer"})
    est = shard_estimate(single, 8, "fsdp", offload=True, model_config=CFG)
    assert est.phase_peaks["forward"] >= act
    assert est.peak_allocated_bytes >= act
