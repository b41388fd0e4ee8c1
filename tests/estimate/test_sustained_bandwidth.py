"""Memory-bound terms run at the board's measured sustained bandwidth (steptime.yaml sustained_bandwidth, rows in
bench/data/membw_measured.csv), or at one stated fallback, labelled an assumption, where a board has no row."""

from __future__ import annotations

import csv
import datetime as dt
import statistics
from pathlib import Path

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import gpu, job

ROWS = Path(__file__).parents[2] / "bench" / "data" / "membw_measured.csv"


def rows() -> dict[str, dict[str, str]]:
    with ROWS.open() as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_each_row_is_sourced_dated_and_unique():
    with ROWS.open() as f:
        ids = [r["id"] for r in csv.DictReader(f)]
    assert len(ids) == len(set(ids))
    for r in rows().values():
        assert r["url"].startswith("https://github.com/chsasank/device-benchmarks/blob/7ccc883")
        assert dt.date.fromisoformat(r["source_date"]) <= dt.date.fromisoformat(r["retrieved"])
        assert r["label"] == "measured" and r["conditions"]


def test_each_measured_fraction_is_its_rows_rate_over_the_catalog_bandwidth():
    # A row or a catalog figure edited alone would leave the fraction out of step with the measurement it cites.
    data = rows()
    boards = tp.load_table()["sustained_bandwidth"]["boards"]
    assert {b["row"] for b in boards.values()} == set(data)  # every row is used, each once
    for name, entry in boards.items():
        r = data[entry["row"]]
        catalog = resolve_gpu(r["board"])
        assert catalog.name == name and entry["label"] == "measured"
        assert entry["value"] == pytest.approx(float(r["measured_gbs"]) / catalog.mem_bw_gbs, abs=0.0015), name
        assert 0.5 < entry["value"] <= 1.0  # a copy cannot beat the datasheet


def test_the_fraction_is_read_from_the_data_and_the_fallback_is_labelled_an_assumption():
    table = tp.load_table()
    t4 = resolve_gpu("T4")
    assert tp.sustained_bandwidth(t4, table) == (pytest.approx(320e9 * 0.750), "measured")
    fallback = table["sustained_bandwidth"]["default"]
    assert fallback["label"] == "assumption"
    measured = [b["value"] for b in table["sustained_bandwidth"]["boards"].values()]
    assert fallback["value"] == pytest.approx(statistics.median(measured), abs=0.005)  # the stated median
    unmeasured = gpu(name="NoSuchBoard", mem_bw_gbs=1000)
    assert tp.sustained_bandwidth(unmeasured, table) == (pytest.approx(1000e9 * fallback["value"]), "assumption")


@pytest.mark.parametrize("method", ["qlora", "full"])
def test_every_memory_bound_term_slows_by_the_boards_fraction(method):
    table = tp.load_table()
    sb = table["sustained_bandwidth"]
    at = {**sb, "boards": {**sb["boards"], "X": {"value": 1.0, "label": "measured"}}}
    half = {**sb, "boards": {**sb["boards"], "X": {"value": 0.5, "label": "measured"}}}
    board, work = gpu(name="X"), job(method=method, trainable=0 if method == "full" else 40_000_000, grad_accum=2)
    full_bw = tp.step_time(work, board, table={**table, "sustained_bandwidth": at})
    slow = tp.step_time(work, board, table={**table, "sustained_bandwidth": half})
    terms = ("elementwise", "optimizer") + (("dequant",) if method == "qlora" else ())
    for term in terms:
        assert full_bw.parts[term] > 0
        assert slow.parts[term] == pytest.approx(2 * full_bw.parts[term]), term
    assert slow.parts["compute"] == pytest.approx(full_bw.parts["compute"])  # the matmuls do not care
