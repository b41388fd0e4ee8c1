"""eval_after: true scores the run at the end into the registry; compare puts $ against quality."""

from __future__ import annotations

import json


def test_compare_shows_points_against_cost(run_cli):
    from cheaptune.runs.registry import Registry

    reg = Registry()
    for name, cost, acc in (("cheap", 1.0, 0.70), ("dear", 2.1, 0.76), ("unscored", 0.5, None)):
        run = reg.start_run(name=name)
        run.add_segment_cost(cost)
        if acc is not None:
            run.event("eval", {"base": {"accuracy": 0.5}, "tuned": {"accuracy": acc, "loss": 1.0}})
        run.finish("finished")
    code, out, err = run_cli("compare", "cheap", "dear", "unscored", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["runs"]}
    assert rows["dear"]["vs_cheapest"] == "+6.0 points for 2.1x the cost"
    assert rows["cheap"]["quality"] == 0.70 and rows["cheap"]["vs_cheapest"] is None
    assert rows["unscored"]["quality"] is None


def test_train_eval_after_records_scores(tiny_model_dir, tmp_path, run_cli):
    rows = [{"messages": [{"role": "user", "content": f"Review {i}: good?"},
                          {"role": "assistant", "content": ["yes", "no"][i % 2]}]} for i in range(12)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "t.yaml"
    cfg.write_text("val_set_size: 4\neval_after: true\nreport_to: none\n")
    out = tmp_path / "out"
    code, stdout, err = run_cli("train", str(cfg), "--model", str(tiny_model_dir), "--data", str(data), "-o",
                                str(out), "--max-steps", "1", "--seq-len", "64", "--device", "cpu", "--json")
    assert code == 0, err
    s = json.loads(stdout)
    assert s["eval"]["rows"] == 4 and {"loss", "accuracy"} <= set(s["eval"]["tuned"])
    assert (out / "eval_report.md").is_file()
    from cheaptune.runs.registry import Registry

    (run,) = Registry().list_runs()
    events = [e for e in Registry().get_run(run["id"])["events"] if e["kind"] == "eval"]
    assert events[0]["detail"]["tuned"]["accuracy"] == s["eval"]["tuned"]["accuracy"]

    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(data), "-o", str(tmp_path / "o2"),
                           "--eval-after", "--device", "cpu")
    assert code == 2 and "val_set_size or eval_data" in err
