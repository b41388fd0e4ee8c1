"""Run listings a person can copy from, and plots that say something: whole ids at 80 columns, short
prefixes accepted, `compare` refusing one run, the cost axis following what was spent."""

from __future__ import annotations

import pytest

from cheaptune.runs.registry import Registry
from cheaptune.runs.report import bars, cost_scale, write_plots


def _runs(n: int = 3) -> list[str]:
    reg = Registry()
    ids = []
    for i in range(n):
        run = reg.start_run(name=f"run-with-a-long-name-{i}", model="some-org/a-model-with-a-long-name", method="lora",
                            gpu="A100-80GB", cost_predicted_usd=1.0)
        run.add_segment_cost(0.5)
        run.finish("finished", eval_loss=2.0 - i / 10)
        ids.append(run.id)
    return ids


@pytest.mark.parametrize("columns", ["80", "120"])
def test_runs_never_cuts_an_id(run_cli, monkeypatch, columns):
    ids = _runs()
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run_cli("runs")
    assert code == 0 and all(i in out for i in ids)
    assert max(len(line) for line in out.splitlines()) <= int(columns)


def test_a_short_unique_prefix_names_a_run(run_cli):
    ids = _runs()
    shortest = min(len(p) for p in (_unique_prefix(i, ids) for i in ids))
    target = next(i for i in ids if len(_unique_prefix(i, ids)) == shortest)
    code, out, _ = run_cli("report", _unique_prefix(target, ids), "--json")
    assert code == 0 and f'"id": "{target}"' in out
    code, _, err = run_cli("compare", _unique_prefix(ids[0], ids), _unique_prefix(ids[1], ids), "--json")
    assert code == 0, err


def _unique_prefix(rid: str, ids: list[str]) -> str:
    return next(rid[:n] for n in range(1, len(rid) + 1) if sum(o.startswith(rid[:n]) for o in ids) == 1)


def test_compare_refuses_one_run(run_cli):
    ids = _runs(1)
    code, out, err = run_cli("compare", ids[0])
    assert code == 2 and out == "" and "two or more runs" in err and len(err.strip().splitlines()) == 1


def test_cost_axis_follows_what_was_spent():
    top, drawn, off = cost_scale(0.05, {"budget": 5.0, "predicted": 0.08})
    assert 0.08 < top < 0.1 and drawn == {"predicted": 0.08}
    assert off == ["budget $5.00 off scale (100x spent)"]
    top, drawn, off = cost_scale(4.0, {"budget": 5.0})
    assert top == pytest.approx(5.75) and drawn == {"budget": 5.0} and off == []


def test_no_plan_is_said_not_drawn_as_an_empty_bar(tmp_path):
    assert bars(None, 2.0) == [("predicted", None, "no plan"), ("actual", 2.0, "not measured")]
    reg = Registry()
    run = reg.start_run(name="unplanned", model="m", budget_usd=5.0)
    for step in (1, 2):
        run.record_point(step, elapsed_s=step * 60.0, loss=2.0, cost_usd=0.01 * step)
    run.add_segment_cost(0.02)
    run.finish("finished", steps=2)
    names = sorted(p.name for p in write_plots(reg.get_run(run.id), tmp_path))
    assert names == ["cost.png", "loss.png", "predicted.png"]
