"""A QLoRA estimate is a range until a GPU measures its terms; the fit checks (device total) use the upper end."""

from __future__ import annotations

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory, with_range


def test_qlora_shows_a_range_and_device_total_is_its_upper_end(tiny_cfg):
    base = dict(model=tiny_cfg.to_dict(), micro_batch=1, seq_len=16)
    q = estimate_memory(EstimateRequest(method="qlora", **base))
    rng = q.details["range"]
    lo, hi = rng["device_total_bytes"]
    assert q.device_total_bytes == hi > lo and sum(q.breakdown.values()) == hi
    assert rng["peak_allocated_bytes"] == [q.peak_allocated_bytes,
                                           int(q.peak_allocated_bytes * (1 + rng["fraction"]))]
    assert q.breakdown["qlora_margin"] == hi - lo
    lora = estimate_memory(EstimateRequest(method="lora", **base))
    assert "range" not in lora.details and with_range(lora, "lora") is lora
    assert with_range(q, "qlora") == q  # applied from the simulated end: idempotent
    wider = with_range(q, "qlora", fraction=2 * rng["fraction"])
    assert wider.device_total_bytes - lo > 1.9 * (hi - lo) and wider.details["range"]["device_total_bytes"][0] == lo


def test_sharding_a_qlora_estimate_shards_its_simulated_end_then_takes_the_range(tiny_cfg):
    """shard_estimate of an estimate that already carries a range (the plan shards estimate_memory's result)
    gives what estimate_memory gives for the same GPUs: no stale margin, the range of the sharded peak."""
    from cheaptune.estimate.memory.sharding import shard_estimate

    base = dict(model=tiny_cfg.to_dict(), method="qlora", micro_batch=1, seq_len=16)
    one = estimate_memory(EstimateRequest(**base))
    two = estimate_memory(EstimateRequest(**base, gpus=2, sharding="ddp"))
    assert shard_estimate(one, 2, "ddp", model_config=tiny_cfg.to_dict()) == two
    lo, hi = two.details["range"]["device_total_bytes"]
    assert two.device_total_bytes == hi > lo and two.breakdown["qlora_margin"] == hi - lo
