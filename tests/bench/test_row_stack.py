"""One mapping from a public row to its trainer stacks (throughput_accuracy.row_stack), used by every bench, gives
every row of bench/data/*.csv the stacks the three mappings it replaced gave (the throughput bench's stack_of and
quant-layout fallback, the job bench's fit_stack_of and its own FIT_AS lookups; frozen below as they were)."""

from __future__ import annotations

import csv

import pytest

from tests.bench.conftest import BENCH

SOURCE_STACK = {"torchtune-readme": "torchtune", "fms-fsdp-readme": "fms-fsdp", "vectorlm-docs": "vectorlm",
                "torchtitan-perf": "torchtitan"}
FIT_AS = {"trl": "hf"}


def _old_stack_of(row: dict) -> str:  # bench/throughput_accuracy.py stack_of at 069c930
    stack = row.get("stack") or SOURCE_STACK.get(row["source"], row["source"])
    if stack == "other":
        stack = SOURCE_STACK.get(row["source"], row["source"])
    return FIT_AS.get(stack, stack)


def _old_fit_stack_of(row: dict, table: dict) -> str:  # bench/job_accuracy.py fit_stack_of at 069c930
    stack = FIT_AS.get(row["stack"], row["stack"])
    while "same_as" in table["stacks"].get(stack, {}):
        stack = table["stacks"][stack]["same_as"]
    return stack


def _rows() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((BENCH / "data").glob("*.csv")):
        with path.open() as f:
            out += [(path.name, r) for r in csv.DictReader(f) if "stack" in r]
    return out


ROWS = _rows()


def test_the_csvs_name_the_stacks_checked():
    names = {name for name, _ in ROWS}
    assert {"throughput_public.csv", "jobs_public.csv", "grpo_public.csv"} <= names and len(ROWS) > 300
    assert {r["stack"] for _, r in ROWS} >= {"trl", "other", "hf", "unsloth", "litgpt", "torchtune"}


@pytest.mark.parametrize(("name", "row"), ROWS, ids=[f"{n}:{r['id']}" for n, r in ROWS])
def test_row_stack_gives_every_row_the_stacks_it_had(bench, name, row):
    ta = bench("throughput_accuracy")
    tp = ta.tp
    table = tp.load_table()
    got = ta.row_stack(row, table)
    assert got.fit == _old_stack_of(row)  # fitted and held out by (throughput bench)
    # gradient clipping and the 4-bit layout: the throughput bench's and the job bench's lookups agreed already
    assert tp.clips_gradients(got.fit) == tp.clips_gradients(_old_stack_of(row)) \
        == tp.clips_gradients(FIT_AS.get(row["stack"], row["stack"]))
    assert ta.quant_layout(got.trainer) == ta.quant_layout(row["stack"] or _old_stack_of(row)) \
        == ta.quant_layout(row["stack"])
    if row["stack"]:  # the job bench's timing stack ('other': none of the product's, so the pooled fit)
        assert got.timed == _old_fit_stack_of(row, table)


def test_the_product_mapping_follows_same_as_and_fit_as(bench):
    ta = bench("throughput_accuracy")
    table = {"stacks": {"litgpt": {"same_as": "torchtune"}, "torchtune": {}, "hf": {}}}
    assert ta.row_stack({"source": "x", "stack": "litgpt"}, table).timed == "torchtune"
    assert ta.row_stack({"source": "x", "stack": "trl"}, table) == ta.RowStack("trl", "hf", "hf")
    assert ta.row_stack({"source": "vectorlm-docs", "stack": "other"}, table) == ta.RowStack("other", "vectorlm", "other")
    assert ta.row_stack({"source": "torchtune-readme", "stack": ""}, table).fit == "torchtune"
