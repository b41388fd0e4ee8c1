"""p10-p90 of training time from held-out residuals of the rows most like the job; widened where none are."""

from __future__ import annotations

import math

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.estimate.time import intervals


def rows(board: str, method: str, gpus: int, ratios, stack: str = "hf") -> list[dict]:
    return [{"board_class": board, "method": method, "gpus": gpus, "stack": stack, "source": f"s{i % 2}",
             "log_time_ratio": math.log(r)} for i, r in enumerate(ratios)]


SPREAD = [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 0.95, 1.05, 1.15, 1.25]


def test_the_band_comes_from_the_matching_rows():
    data = rows("a100", "lora", 1, SPREAD) + rows("geforce", "full", 4, [3.0] * 10)
    lo, mid, hi, why = intervals.log_band(data, "a100", "lora", 1)
    assert 0.8 <= math.exp(lo) <= 0.92 and 1.2 <= math.exp(hi) <= 1.31 and "from 10 held-out public rows" in why
    assert math.exp(mid) == pytest.approx(1.075, rel=0.01)


def test_a_job_no_row_supports_gets_a_wider_band_and_says_why():
    data = rows("a100", "lora", 1, SPREAD) + rows("a100", "full", 8, SPREAD)
    lo1, _, hi1, _ = intervals.log_band(data, "a100", "lora", 1)
    lo, _, hi, why = intervals.log_band(data, "geforce", "qlora", 1)  # no GeForce rows: any board, adapter, 1 GPU
    assert hi - lo > hi1 - lo1 and "no 5 hf rows of 2+ sources for geforce qlora" in why and "widened x1.25" in why
    _, _, _, why8 = intervals.log_band(data, "geforce", "lora", 2)  # no adapter rows on several GPUs either:
    assert "any stack, any board, adapter" in why8 and "x3.05" in why8  # the one-GPU rows, a step wider still


def test_another_stacks_rows_count_only_after_the_plans_own_and_widened():
    data = rows("a100", "full", 8, [1.0] * 10, stack="torchtitan") + rows("a100", "full", 8, SPREAD)
    assert "from 10 held-out public rows (hf rows" in intervals.log_band(data, "a100", "full", 8)[3]
    other = rows("a100", "full", 8, [1.0] * 10, stack="torchtitan")
    lo, _, hi, why = intervals.log_band(other, "a100", "full", 8)
    assert "any stack's rows" in why and "widened x1.56" in why and hi - lo >= 2 * 0.05 * 1.56 - 1e-9


def test_board_classes():
    assert intervals.board_class(resolve_gpu("H100")) == "hopper+"
    assert intervals.board_class(resolve_gpu("A100-80GB")) == intervals.board_class(resolve_gpu("A100")) == "a100"
    assert intervals.board_class(resolve_gpu("RTX4090")) == "geforce"
    assert intervals.board_class(resolve_gpu("MI300X")) == "amd"


def test_the_shipped_residuals_give_every_catalog_board_a_band():
    from cheaptune.catalog.gpus import list_gpus

    for g in list_gpus():
        lo, mid, hi, why = intervals.time_band(g, "lora", 1)
        assert lo <= mid <= hi and lo < hi and why


def test_one_sources_rows_do_not_set_a_band_alone():
    one = [{**r, "source": "only"} for r in rows("a100", "full", 4, [5.0] * 10)]
    data = one + rows("a100", "full", 8, SPREAD) + rows("hopper+", "full", 8, SPREAD)
    _, mid, _, why = intervals.log_band(data, "a100", "full", 4)
    assert "widened" in why and math.exp(mid) < 5.0  # the lone benchmark's x5 is not the band's median


def test_a_serial_link_job_prefers_serial_link_rows_and_widens_without_them():
    """A multi-GPU job on a serial link (its transfers unhidden) is not given the band of NVLink rows as if
    they were its own: pooled serial-link rows first; without any, the NVLink rows one step wider, saying so."""
    nvlink = rows("a100", "full", 4, SPREAD)
    staged = [{**r, "serial_link": True} for r in rows("geforce", "full", 2, [0.5, 0.55, 0.6, 0.5, 0.55, 0.6])]
    lo0, _, hi0, _ = intervals.log_band(nvlink, "datacenter-ampere", "full", 4)
    lo, _, hi, why = intervals.log_band(nvlink, "datacenter-ampere", "full", 4, serial_link=True)
    assert hi - lo > hi0 - lo0 and "none of them on a serial link" in why
    _, mid, _, why2 = intervals.log_band(nvlink + staged, "datacenter-ampere", "full", 4, serial_link=True)
    assert "on serial links" in why2 and math.exp(mid) < 0.7  # the serial-link rows' median, not NVLink's
    assert intervals.log_band(nvlink + staged, "a100", "full", 4) == intervals.log_band(nvlink, "a100", "full", 4)
    assert not intervals.residual_rows([{"board_class": "a100", "method": "lora", "gpus": 2, "log_time_ratio": 0.0}]
                                       )[0]["serial_link"]


def test_a_multi_gpu_job_pools_multi_gpu_rows_before_single_gpu_ones():
    """No row of the job's GPU-count class: other multi-GPU rows first, not single-GPU confidence."""
    data = rows("a100", "full", 1, [1.0] * 10) + rows("a100", "full", 64, [1.5, 1.6, 1.7, 1.5, 1.6, 1.7])
    _, mid, _, why = intervals.log_band(data, "geforce", "full", 2)
    assert "full on several GPUs" in why and math.exp(mid) == pytest.approx(1.6, rel=0.01)
    _, mid1, _, why1 = intervals.log_band(rows("a100", "full", 64, [1.6] * 10), "geforce", "full", 1)
    assert "full on one GPU" not in why1 and "any stack, any board, full)" in why1  # no one-GPU row: all of them


def test_a_board_class_holds_one_tier_so_workstation_blackwell_is_not_hopper_plus():
    """gpus.yaml's tier is the catalog's form-factor fact: a class mixes no tiers (the RTX PRO 6000, a PCIe GDDR7
    Blackwell workstation board, took the H100/B200 class before), and hopper+ is datacenter Hopper/Blackwell only."""
    from cheaptune.catalog.gpus import list_gpus

    tiers: dict[str, set[str]] = {}
    for g in list_gpus():
        tiers.setdefault(intervals.board_class(g), set()).add(g.tier)
        assert (intervals.board_class(g) == "hopper+") == (g.vendor == "nvidia" and g.tier == "datacenter"
                                                          and g.arch in ("hopper", "blackwell")), g.name
    assert all(len(t) == 1 for t in tiers.values()), tiers
    assert intervals.board_class(resolve_gpu("RTXPRO6000")) == "professional-blackwell"
