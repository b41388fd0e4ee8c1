"""bench/grpo_accuracy.py reads each public row as trl/Unsloth ran it, and scores leave-one-source-out."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def acc():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the script imports run_record and throughput_accuracy beside it
    spec = importlib.util.spec_from_file_location("grpo_accuracy", BENCH / "grpo_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(acc):
    return {r["id"]: r for r in csv.DictReader(acc.ROWS.open())}


def test_rows_are_read_as_their_trainer_ran_them(acc, rows):
    setup = acc.case(rows["GO2"])[0]  # open-r1: 7 processes x 2 completions, 7 generations, ZeRO-2 + 1 vLLM GPU
    assert setup.request.micro_batch == 2 and setup.request.sharding == "zero2" and setup.request.gpus == 7
    assert setup.server and setup.rounds == 8 and setup.expected_completion_length == 639
    assert setup.engine_batch == 14  # every training process's micro-batch on the one server
    unsloth = acc.case(rows["GU1"])[0]
    assert unsloth.request.micro_batch == 8 and unsloth.generation_backend == "vllm"  # batch 1 raised to 8 gens
    assert acc.case(rows["GU4"]) == "completion length not stated"


def test_leave_one_source_out_scores_held_out_rows(acc, rows, monkeypatch):
    monkeypatch.setattr(acc, "GRID", {k: v[:2] for k, v in acc.GRID.items()})  # 8 grid points: fast
    ev = acc.evaluate([r for r in rows.values() if r["scope"] == "bench"])
    sources = {r["source"] for r in ev["results"]}
    assert len(sources) >= 3 and set(ev["loso_constants"]) == sources
    for r in ev["results"]:
        assert r["loso"] > 0 and r["loso_at_cap"] >= r["loso"] - 1e-9
    assert ev["summary"]["loso"]["rows"] == len(ev["results"]) and ev["summary"]["loso"]["typical"] >= 1
