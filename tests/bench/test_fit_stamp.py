"""`throughput_accuracy.py --write-data` dates each fitted stack block in steptime.yaml the day of the fit and
stamps the commit it ran on (its source_date stayed at the first fit's, 2026-12-01, through later refits)."""

from __future__ import annotations

import datetime as dt
import shutil

import yaml


def test_write_constants_stamps_the_day_and_commit_of_the_fit_in_place(bench, tmp_path):
    ta, record = bench("throughput_accuracy"), bench("run_record")
    path = tmp_path / "steptime.yaml"
    shutil.copy(ta.DATA / "steptime.yaml", path)
    tables = {stack: {"e_max": 0.4321} for stack in ta.PRODUCT_STACKS}
    for _ in range(2):  # a refit replaces the last stamp, never adds a second
        ta.write_constants(tables, [], path)
    doc, text = yaml.safe_load(path.read_text()), path.read_text()
    today, ran_on = dt.date.today().isoformat(), record.commit()
    for stack in ta.PRODUCT_STACKS:
        block = doc["stacks"][stack]
        assert block["efficiency"]["e_max"]["value"] == 0.4321
        assert (block["source_date"], block["read"], block["commit"]) == (today, today, ran_on)
    assert text.count("\n    commit: ") == text.count("\n    source_date: \"" + today) == len(ta.PRODUCT_STACKS)
    assert ran_on != "unknown" and len(ran_on.split()[0]) == 12  # this checkout's HEAD, short form
    original = yaml.safe_load((ta.DATA / "steptime.yaml").read_text())
    assert {k: v for k, v in doc.items() if k != "stacks"} == {k: v for k, v in original.items() if k != "stacks"}


def test_commit_outside_a_checkout_is_unknown(bench, tmp_path):
    assert bench("run_record").commit(tmp_path) == "unknown"


def test_the_fit_own_outputs_do_not_make_its_tree_uncommitted(bench, tmp_path):
    """--write-data writes time_residuals.json before it stamps steptime.yaml: the stamp read '+ uncommitted
    changes' on a clean checkout. Any other change under src/ still counts."""
    import subprocess

    record = bench("run_record")
    data = tmp_path / "src/cheaptune/estimate/data"
    data.mkdir(parents=True)
    for name in ("time_residuals.json", "model.py"):
        (data / name).write_text("0\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (data / "time_residuals.json").write_text("1\n")
    assert "+" not in record.commit(tmp_path)
    (data / "model.py").write_text("1\n")
    assert record.commit(tmp_path).endswith("+ uncommitted changes")
