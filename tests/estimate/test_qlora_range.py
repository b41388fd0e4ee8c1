"""A QLoRA estimate is a range until a GPU measures its terms; the fit checks (device total) use the upper end."""

from __future__ import annotations

from cheaptune.estimate.memory import EstimateRequest, estimate_memory, with_range


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
