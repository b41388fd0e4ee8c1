"""The plan prices the tokens that train: each example is cut to --seq-len before packing, so a 2.5M-token
row costs 2,048 tokens at --seq-len 2048, not 2.5M (issue 33); and --skip-bad-rows says what it skipped."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from cheaptune.plan.planner import make_plan
from cheaptune.plan.render import text_sections, to_json
from cheaptune.plan.sources import build_workload
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

LENGTHS = tuple([500] * 1000 + [2_500_000])  # one huge row among short ones


def plan(w: Workload):
    return make_plan("test", SHAPE_7B, 4096, w, Constraints(methods=("lora",)), GPUS, OFFERS, fake_fit())


def test_a_row_past_seq_len_is_priced_at_what_trains():
    w = Workload(tokens=sum(LENGTHS), epochs=2, seq_len=2048, effective_batch=16, lengths=LENGTHS)
    trains = 1000 * 500 + 2048
    best = plan(w).recommended
    assert best.tokens_per_s * best.details["train_hours"] * 3600 == pytest.approx(2 * trains, rel=1e-3)
    # the same job given as the tokens that train costs the same: the cut row is not paid for
    same = plan(Workload(tokens=trains, epochs=2, seq_len=2048, effective_batch=16)).recommended
    assert best.details["train_hours"] == pytest.approx(same.details["train_hours"], rel=1e-6)
    assert w.trained_tokens == trains
    assert best.total < plan(Workload(tokens=sum(LENGTHS), epochs=2, seq_len=2048, effective_batch=16)).recommended.total


def test_the_plan_says_how_many_tokens_train_and_the_audit_prices_other_seq_lens_the_same_way():
    w = Workload(tokens=sum(LENGTHS), epochs=1, seq_len=2048, effective_batch=16, lengths=LENGTHS)
    r = plan(w)
    doc = to_json(r)
    assert doc["workload"]["trained_tokens"] == 502_048
    head = text_sections(doc)[0][1][0]
    assert "502,048 of them train (--seq-len 2048 cuts the rest)" in head
    assert any("the plan prices the 502,048 tokens per epoch that train" in x for x in r.audit)
    longer = next(x for x in r.audit if x.startswith("seq 2048 -> 4096"))
    other, base = (float(x) for x in re.search(r"\(\$([\d.]+) vs \$([\d.]+)\)", longer).groups())
    assert other == pytest.approx(base, rel=0.1, abs=0.01)  # 2,048 more tokens of the long row, not its 2.5M
    # (abs: the audit prints whole cents, and this job costs a few)


def test_skip_bad_rows_is_counted_in_the_plan(tmp_path):
    good = {"messages": [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n[1, 2]\n" + json.dumps(good) + "\n")
    spec = SimpleNamespace(id="meta-llama/Llama-3.1-8B", family="llama-3.1")  # not a folder: estimated
    w = build_workload(spec, str(path), None, None, None, 1.0, 512, 16, skip_bad_rows=True)
    said = [x for x in plan(w).audit if "bad rows skipped" in x]  # what the user reads, checked first
    assert len(said) == 1 and said[0].startswith("2 bad rows skipped (--skip-bad-rows); the first: ")
    assert w.examples == 2 and w.skipped == said[0]
