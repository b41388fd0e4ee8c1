"""Each kind of bad row names the file, the line and the problem; --skip-bad-rows counts them."""

from __future__ import annotations

import pytest

from cheaptune.data import load_dataset_rows
from cheaptune.errors import BadInput
from tests.data.conftest import ALPACA, MESSAGES

CASES = [
    (ALPACA, '{"instruction": "x", "output": ', r"data.jsonl:3: not valid JSON"),
    (ALPACA, {"instruction": "x", "input": ""}, r"data.jsonl:3: missing 'output' \(alpaca rows need instruction and output\)"),
    (ALPACA, {"instruction": "x", "output": 7}, r"data.jsonl:3: 'output' is a number, expected a string"),
    (ALPACA, {"instruction": "x", "output": "  "}, r"data.jsonl:3: empty 'output'"),
    (ALPACA, ["instruction", "output"], r"data.jsonl:3: row is a list, expected a JSON object"),
    (MESSAGES, {"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]},
     r"data.jsonl:3: messages\[1\]: unknown role 'bot'"),
    (MESSAGES, {"messages": [{"role": "user", "content": "a"}]}, r"data.jsonl:3: 'messages' has no assistant turn"),
    (MESSAGES, {"messages": "hello"}, r"data.jsonl:3: 'messages' is a string, expected a list"),
    (MESSAGES, {"messages": [{"role": "user", "content": None}]}, r"messages\[0\].content is null"),
]


@pytest.mark.parametrize(("good", "bad", "pattern"), CASES)
def test_bad_row_names_file_line_problem(jsonl, good, bad, pattern):
    path = jsonl([good[0], good[0], bad, good[0]])
    with pytest.raises(BadInput, match=pattern) as err:
        load_dataset_rows(path)
    assert str(path) in str(err.value) and "--skip-bad-rows" in str(err.value)
    got = load_dataset_rows(path, skip_bad_rows=True)
    assert (got.n_rows, got.n_bad) == (3, 1) and len(got.dataset) == 3
    assert got.bad_examples[0].startswith(f"{path}:3: ")


def test_all_bad_rows_counted_in_one_message(jsonl):
    path = jsonl([ALPACA[0], "not json", {"instruction": "x"}, ALPACA[1], "[1"])
    with pytest.raises(BadInput, match=r"data.jsonl:2: not valid JSON.*\(2 more bad rows\)"):
        load_dataset_rows(path)
    got = load_dataset_rows(path, skip_bad_rows=True)
    assert (got.n_rows, got.n_bad) == (2, 3)
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in got.bad_examples] == ["2", "3", "5"]


def test_blank_lines_are_not_rows_and_keep_numbering(jsonl):
    path = jsonl([ALPACA[0], "", {"instruction": "x"}])
    with pytest.raises(BadInput, match=r"data.jsonl:3: missing 'output'"):
        load_dataset_rows(path)


def test_first_line_bad_json_still_detects_from_next(jsonl):
    got = load_dataset_rows(jsonl(["{oops", ALPACA[0]]), skip_bad_rows=True)
    assert got.fmt == "alpaca" and got.n_bad == 1


def test_nothing_usable(jsonl, tmp_path):
    with pytest.raises(BadInput, match="all 2 rows are bad"):
        load_dataset_rows(jsonl(["x", "y"]), skip_bad_rows=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(BadInput, match="has no rows"):
        load_dataset_rows(empty)
