"""cheaptune eval on the tiny Llama + a LoRA adapter: base vs tuned scores, report, registry event, bad input."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.export.conftest import tiny_adapter  # noqa: F401 (the shared adapter fixture)


@pytest.fixture
def label_file(tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"Review {i}: is it good?"},
                          {"role": "assistant", "content": ["positive", "negative"][i % 2]}]} for i in range(6)]
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_scores_base_and_tuned_and_records_the_run(tiny_model_dir, tiny_adapter, label_file, tmp_path,  # noqa: F811
                                                        run_cli):
    from cheaptune.runs.registry import Registry

    run = Registry().start_run(name="r1", model=str(tiny_model_dir), output_dir=str(tiny_adapter))
    run.finish("finished")
    report = tmp_path / "report.md"
    code, stdout, err = run_cli("eval", "r1", "--data", str(label_file), "--limit", "4", "--report", str(report),
                                "--max-new-tokens", "3", "--json")
    assert code == 0, err
    res = json.loads(stdout)
    assert res["rows"] == 4 and res["run_id"] == run.id
    for side in ("base", "tuned"):
        assert res[side]["loss"] > 0 and 0 <= res[side]["accuracy"] <= 1 and set(res[side]["labels"]) == {
            "positive", "negative"}
    assert res["base"]["loss"] != res["tuned"]["loss"]  # the adapter changes the model
    text = report.read_text()
    assert "| loss |" in text and "| accuracy |" in text and "Confusion" in text
    (event,) = [e for e in Registry().get_run(run.id)["events"] if e["kind"] == "eval"]
    assert event["detail"]["tuned"]["loss"] == pytest.approx(res["tuned"]["loss"])


def test_eval_bad_input_is_one_line(tiny_adapter, tmp_path, run_cli):  # noqa: F811
    code, _, err = run_cli("eval", str(tiny_adapter), "--data", str(tmp_path / "missing.jsonl"))
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err
    code, _, err = run_cli("eval", str(tmp_path), "--data", "x.jsonl")
    assert code == 2 and "no adapter_config.json" in err


@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="the harness extra is not installed")
def test_lm_eval_task_from_a_local_folder(tiny_model_dir, tiny_adapter, tmp_path, run_cli):  # noqa: F811
    rows = [{"question": f"What is {i} plus {i}?", "choices": [f"{2 * i}", f"{2 * i + 1}"], "label": 0} for i in range(4)]
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "sums.yaml").write_text(
        "task: tiny_sums\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'sums.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}} Answer:"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    code, stdout, err = run_cli("eval", str(tiny_adapter), "--tasks", "tiny_sums", "--tasks-dir", str(tmp_path),
                                "--base", str(tiny_model_dir), "--report", str(tmp_path / "r.md"), "--json")
    assert code == 0, err
    sides = json.loads(stdout)["tasks"]["tiny_sums"]
    assert 0 <= sides["base"]["acc"] <= 1 and 0 <= sides["tuned"]["acc"] <= 1
    assert "lm-eval task tiny_sums" in (tmp_path / "r.md").read_text()
    code, _, err = run_cli("eval", str(tiny_adapter), "--tasks", "tiny_sum", "--tasks-dir", str(tmp_path),
                           "--base", str(tiny_model_dir))
    assert code == 2 and "unknown lm-eval task 'tiny_sum'" in err
