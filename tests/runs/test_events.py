"""`report` shows a run's events in words: the probe, an eval, a preemption; `compare` takes a run once."""

from __future__ import annotations

from cheaptune.runs.registry import Registry

PROBE = {"steps": 3, "micro_batch": 4, "grad_accum": 1, "s_per_step": 1.25, "tokens_per_s": 46.2,
         "peak_allocated": None, "peak_reserved": None, "device_used": None, "predicted_peak": None,
         "predicted_tokens_per_s": None, "gpu": None, "planned_gpu": "H100"}


def test_events_read_as_sentences():
    from cheaptune.runs.events import event_line  # here, so the CLI tests below need only report and compare

    probe = event_line({"kind": "probe", "detail": PROBE})
    assert probe.startswith("probe (3 steps, micro-batch 4 x 1): memory not measured")
    assert "ran on the CPU, not the plan's H100" in probe and "{" not in probe
    ev = event_line({"kind": "eval", "detail": {"data": "held.jsonl", "rows": 16, "base": {"loss": 2.5, "accuracy": 0.5},
                                                "tuned": {"loss": 1.25, "accuracy": 0.875}}})
    assert ev == "eval on held.jsonl (16 rows): base loss 2.5, accuracy 50.0%; tuned loss 1.25, accuracy 87.5%"
    assert event_line({"kind": "preempted", "detail": {"reason": "SIGTERM", "step": 5, "save_s": 0.5}}) == (
        "preempted at step 5 (SIGTERM); checkpoint saved in 0.50 s")
    assert event_line({"kind": "budget_threshold", "detail": {"message": "50% of the $1.00 budget used"}}) == (
        "budget_threshold: 50% of the $1.00 budget used")
    assert event_line({"kind": "launched", "detail": {"cluster": "c1", "price": 0.5, "tags": ["a"]}}) == (
        "launched: cluster c1, price 0.5")
    assert event_line({"kind": "probe", "detail": {"steps": 3}}) == "probe: steps 3"  # a partial record


def test_report_prints_the_probe_in_words(run_cli, tmp_path):
    run = Registry().start_run(name="p", model="m")
    run.event("probe", PROBE)
    run.finish("finished")
    rc, out, _ = run_cli("report", run.id, "--out", str(tmp_path))
    assert rc == 0 and "probe (3 steps, micro-batch 4 x 1)" in out and "'steps'" not in out


def test_compare_takes_a_run_named_twice_once(run_cli):
    reg = Registry()
    a = reg.start_run(name="a", model="m")
    a.finish("finished", eval_loss=1.0)
    rc, _, err = run_cli("compare", a.id, "a")
    assert rc == 2 and "two or more runs (got 1 different" in err and err.count("\n") == 1
    b = reg.start_run(name="b", model="m")
    b.finish("finished", eval_loss=2.0)
    import json

    rc, out, _ = run_cli("compare", "a", "b", a.id, "--json")
    assert rc == 0 and sorted(r["name"] for r in json.loads(out)["runs"]) == ["a", "b"]
