"""A price row is held to what a plan file can hold of its offer, and its date is a real day (one line each)."""

from __future__ import annotations

import pytest

from cheaptune.catalog.prices import parse_row
from cheaptune.errors import BadInput

ROW = dict(provider="mine", kind="on-demand", gpu="H100", gpu_count="1", instance_type="x", region="r1",
           price_per_hour="2", billing_unit_s="1", min_billed_s="60", storage_gb_month="0.02", egress_per_gb="0",
           interruption_per_hour="", notice_s="0", basis="quoted", source="me", date="undated", read="2026-12-02",
           note="")


def test_a_row_within_the_limits_is_read():
    o = parse_row({**ROW, "gpu_count": "4096", "min_billed_s": str(86_400 * 31), "date": "2024-02-29"}, "f:2")
    assert (o.gpu_count, o.min_billed_s, o.date) == (4096, 86_400 * 31, "2024-02-29")


@pytest.mark.parametrize(("col", "value", "said"), [
    ("min_billed_s", "99999999999", "column min_billed_s: expected a whole number >= 0 and <= 2678400"),
    ("gpu_count", "100000", "column gpu_count: expected a whole number >= 1 and <= 4096"),
    ("billing_unit_s", "90000", "column billing_unit_s: expected a whole number >= 1 and <= 86400"),
    ("price_per_hour", "1e6", "column price_per_hour: expected a number >= 1e-09 and <= 100000"),
    ("date", "2026-13-45", "column date: expected YYYY-MM-DD or undated, got '2026-13-45'"),
    ("date", "2025-02-29", "column date: expected YYYY-MM-DD or undated"),
    ("read", "2026-00-10", "column read: expected YYYY-MM-DD"),
])
def test_a_row_past_a_plan_files_limits_or_with_no_real_day_is_one_line(col, value, said):
    with pytest.raises(BadInput, match=f"^f:2: {said}"):
        parse_row({**ROW, col: value}, "f:2")
