"""cheaptune eval on the tiny Llama + a LoRA adapter: base vs tuned scores, report, registry event, bad input."""

from __future__ import annotations

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
