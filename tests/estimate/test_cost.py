"""Billing rounding, minimums, storage proration, egress, artifact sizes."""

from __future__ import annotations

import pytest

from cheaptune.estimate.cost import cost


def test_billing_rounds_up_to_unit_and_minimum():
    assert cost.billed_seconds(61, billing_unit_s=60) == 120
    assert cost.billed_seconds(10, billing_unit_s=1, min_billed_s=60) == 60
    assert cost.billed_seconds(3601, billing_unit_s=3600, min_billed_s=3600) == 7200
    assert cost.billed_seconds(120.0, billing_unit_s=60) == 120
    assert cost.billed_seconds(0, 60, 60) == 0


def test_compute_cost_hourly_vs_per_second():
    per_s = cost.compute_cost(600, 2.0, billing_unit_s=1)
    hourly = cost.compute_cost(600, 2.0, billing_unit_s=3600, min_billed_s=3600)
    assert per_s == pytest.approx(2.0 / 6)
    assert hourly == pytest.approx(2.0)


def test_storage_is_prorated_by_month():
    assert cost.storage_cost(100, 730, 0.10) == pytest.approx(10.0)
    assert cost.storage_cost(100, 7.3, 0.10) == pytest.approx(0.10)


def test_egress_zero_where_free():
    assert cost.egress_cost(14, None) == 0
    assert cost.egress_cost(14, 0.09) == pytest.approx(1.26)


def test_artifacts_adapter_vs_merged():
    a = cost.artifact_sizes("lora", total_params=7_000_000_000, trainable_params=40_000_000)
    f = cost.artifact_sizes("full", total_params=7_000_000_000, trainable_params=7_000_000_000)
    assert a.shipped_bytes("lora") == 160_000_000  # fp32 adapters (bf16-mixed)
    assert a.shipped_bytes("lora", merged=True) == 14_000_000_000
    assert f.shipped_bytes("full") == 14_000_000_000
    assert f.checkpoint_bytes == 14_000_000_000 + 28_000_000_000  # bf16-true: bf16 weights and bf16 moments
    assert a.checkpoint_bytes == 160_000_000 + 320_000_000  # fp32 adapter + fp32 moments


def test_checkpoint_bytes_follow_each_methods_dtypes():
    n = 1_000_000
    mixed = cost.artifact_sizes("full", 7 * n, 7 * n, precision="bf16-mixed")
    assert mixed.checkpoint_bytes == 7 * n * (4 + 8)  # fp32 master weights and fp32 moments
    q = cost.artifact_sizes("qlora", 7 * n, n)
    assert (q.adapter_bytes, q.checkpoint_bytes) == (2 * n, 2 * n + 4 * n)  # trl casts QLoRA adapters to bf16
    eight = cost.artifact_sizes("lora", 7 * n, n, optimizer="adamw-8bit")
    assert eight.checkpoint_bytes == 4 * n + 2 * n  # two uint8 moments


def test_summary_adds_total():
    s = cost.cost_summary({"compute": 1.0, "storage": 0.25})
    assert s["total"] == 1.25


def test_constants_have_sources():
    import yaml

    doc = yaml.safe_load(cost.STARTUP_FILE.read_text())
    for name, entry in doc["constants"].items():
        assert entry.get("source"), name
    assert cost.constants()["hours_per_month"] == 730
