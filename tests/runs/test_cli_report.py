import json

from cheaptune.runs.registry import Registry


def _seed():
    reg = Registry()
    a = reg.start_run(name="cheap", model="tiny-llama", method="lora", gpu="L4", budget_usd=5.0,
                      cost_predicted_usd=2.0, peak_mem_predicted=2**30)
    for step in range(1, 11):
        a.record_point(step, elapsed_s=step * 60.0, loss=3.0 - step * 0.1, cost_usd=step * 0.2)
    a.add_segment_cost(2.2)
    a.finish("finished", eval_loss=1.9, train_loss=2.0, peak_mem_measured=int(1.1 * 2**30), steps=10)
    b = reg.start_run(name="dear", model="tiny-llama", method="full", gpu="A100-80GB")
    b.add_segment_cost(9.0)
    b.finish("finished", eval_loss=1.8)
    c = reg.start_run(name="worse", model="other")
    c.add_segment_cost(10.0)
    c.finish("failed", eval_loss=2.5)
    return a, b, c


def test_runs_json_and_filters(run_cli):
    _seed()
    rc, out, _ = run_cli("runs", "--json", "--status", "finished", "--model", "TINY")
    assert rc == 0 and [r["name"] for r in json.loads(out)] == ["dear", "cheap"]
    rc, out, _ = run_cli("runs", "--limit", "1")
    assert rc == 0 and "worse" in out and "cheap" not in out
    rc, _, err = run_cli("runs", "--status", "sleeping")
    assert rc == 2 and err.count("\n") == 1


def test_report_writes_pngs_and_json(run_cli, tmp_path):
    a, _, _ = _seed()
    rc, out, _ = run_cli("report", a.id, "--out", str(tmp_path / "rep"), "--json")
    assert rc == 0
    summary = json.loads(out)
    assert summary["cost_ratio"] == 1.1 and round(summary["memory_ratio"], 2) == 1.1
    names = sorted(p.rsplit("/", 1)[1] for p in summary["plots"])
    assert names == ["cost.png", "loss.png", "predicted.png"]
    for p in summary["plots"]:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = run_cli("report", "cheap", "--out", str(tmp_path / "rep2"))
    assert rc == 0 and "110% of predicted" in out


def test_compare_and_bad_run_id(run_cli, tmp_path):
    _seed()
    rc, out, _ = run_cli("compare", "cheap", "dear", "worse", "--json", "--plot", str(tmp_path / "c.png"))
    assert rc == 0
    data = json.loads(out)
    assert [r["name"] for r in data["runs"]] == ["cheap", "dear", "worse"]
    assert [r["pareto"] for r in data["runs"]] == [True, True, False]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    rc, _, err = run_cli("report", "no-such-run")
    assert rc == 2 and "no run 'no-such-run'" in err and err.count("\n") == 1
    rc, _, _ = run_cli("compare", "cheap", "nope", "--json")
    assert rc == 2


def test_report_empty_run_and_compare_plot_with_nothing(run_cli, tmp_path):
    reg = Registry()
    only = reg.start_run(name="only", model="m")
    only.finish("failed")
    other = reg.start_run(name="other", model="m")
    other.finish("failed")
    for ref in ("", "  "):
        rc, out, err = run_cli("report", ref)
        assert rc == 2 and "the run is empty" in err and out == ""
    rc, _, err = run_cli("compare", "only", "other", "--plot", str(tmp_path / "p.png"))
    assert rc == 0 and "no plot written" in err and not (tmp_path / "p.png").exists()
