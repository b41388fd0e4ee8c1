"""Inputs other than JSONL: JSON, CSV, Parquet, save_to_disk folders, hub ids, bad paths."""

from __future__ import annotations

import csv
import json

import pytest

from cheaptune.data import last_turn_as_completion, load_dataset_rows, validation_split
from cheaptune.errors import BadInput
from tests.data.conftest import ALPACA, MESSAGES


def test_json_list_and_data_key(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(ALPACA))
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"data": MESSAGES}))
    assert load_dataset_rows(a).n_rows == 2
    assert load_dataset_rows(b).fmt == "messages"


def test_json_bad_row_named_by_index(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([ALPACA[0], {"instruction": "x"}]))
    with pytest.raises(BadInput, match=r"a.json\[1\]: missing 'output'"):
        load_dataset_rows(p)


def test_json_lines_under_json_name(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("\n".join(json.dumps(r) for r in ALPACA))
    assert load_dataset_rows(p).n_rows == 2


def test_json_not_a_list(tmp_path):
    p = tmp_path / "a.json"
    p.write_text('{"rows": 3}')
    with pytest.raises(BadInput, match="expected a JSON list of rows"):
        load_dataset_rows(p)


def _write_csv(path, rows, fields):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def test_csv_alpaca_with_multiline_cell_line_numbers(tmp_path):
    rows = [{"instruction": "x", "input": "", "output": 7 * " "},
            {"instruction": "Two\nlines", "input": "", "output": "ok"},
            {"instruction": "x", "input": "", "output": ""}]
    p = _write_csv(tmp_path / "d.csv", rows, ["instruction", "input", "output"])
    # header is line 1, a bad record on line 2, one spanning lines 3-4, a bad one on line 5
    with pytest.raises(BadInput, match=r"d.csv:2: empty 'output' \(1 more bad row\)"):
        load_dataset_rows(p)
    got = load_dataset_rows(p, skip_bad_rows=True)
    assert got.dataset[0]["prompt"][0]["content"] == "Two\nlines"
    assert [e.split(": ")[0] for e in got.bad_examples] == [f"{p}:2", f"{p}:5"]
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(BadInput, match="is empty"):
        load_dataset_rows(tmp_path / "empty.csv")


def test_csv_messages_column_holds_json(tmp_path):
    p = _write_csv(tmp_path / "m.csv", [{"messages": json.dumps(MESSAGES[0]["messages"])}], ["messages"])
    assert load_dataset_rows(p).dataset[0]["messages"] == MESSAGES[0]["messages"]


def test_parquet_and_save_to_disk(tmp_path):
    from datasets import Dataset, DatasetDict

    ds = Dataset.from_list([*ALPACA, {"instruction": "x", "input": None, "output": None}])
    ds.to_parquet(str(tmp_path / "d.parquet"))
    with pytest.raises(BadInput, match=r"d.parquet\[2\]: missing 'output'"):
        load_dataset_rows(tmp_path / "d.parquet")
    assert load_dataset_rows(tmp_path / "d.parquet", skip_bad_rows=True).n_rows == 2

    DatasetDict({"train": Dataset.from_list(MESSAGES * 3), "test": Dataset.from_list(MESSAGES)}).save_to_disk(
        str(tmp_path / "saved"))
    assert load_dataset_rows(tmp_path / "saved").n_rows == 3
    assert load_dataset_rows(tmp_path / "saved", split="test").n_rows == 1
    with pytest.raises(BadInput, match="choose a split with --split: one of train, test"):
        load_dataset_rows(tmp_path / "saved", split="validation")


def test_hub_id_offline_and_missing_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match=r"dataset tatsu-lab/alpaca is not a local file and the hub is off"):
        load_dataset_rows("tatsu-lab/alpaca")
    with pytest.raises(BadInput, match=r"dataset .*nope.jsonl not found"):
        load_dataset_rows(tmp_path / "nope.jsonl")
    odd = tmp_path / "d.txt"
    odd.write_text("x")
    with pytest.raises(BadInput, match=r"unsupported file type '.txt'"):
        load_dataset_rows(odd)
    (tmp_path / "folder").mkdir()
    with pytest.raises(BadInput, match="not one written by datasets' save_to_disk"):
        load_dataset_rows(tmp_path / "folder")


def test_validation_split(jsonl):
    ds = load_dataset_rows(jsonl(ALPACA * 10)).dataset
    train, val = validation_split(ds, 0.1, seed=0)
    assert (len(train), len(val)) == (18, 2)
    assert validation_split(ds, 0, seed=0)[1] is None
    assert len(validation_split(ds, 5, seed=0)[1]) == 5
    with pytest.raises(BadInput, match="val_set_size 20"):
        validation_split(ds, 20, seed=0)


def test_last_turn_as_completion(jsonl):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}]
    ds = load_dataset_rows(jsonl([{"messages": chat}, *MESSAGES])).dataset
    got = last_turn_as_completion(ds)
    assert got.column_names == ["prompt", "completion"]
    assert [t["role"] for t in got[0]["prompt"]] == ["system", "user"]
    assert got[0]["completion"] == [{"role": "assistant", "content": "Hello."}]
    assert got[1]["prompt"] == [{"role": "user", "content": "2+2?"}]
