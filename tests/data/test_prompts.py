"""GRPO prompt rows: both layouts become a `prompt` plus the reward's columns; bad rows name their file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheaptune.data import load_dataset_rows
from cheaptune.errors import BadInput


def _file(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_prompt_and_messages_rows_keep_their_columns(tmp_path):
    rows = [{"prompt": "What is 2+2?", "answer": "4"}, {"prompt": "What is 3+3?", "answer": "6"}]
    d = load_dataset_rows(_file(tmp_path, rows), objective="grpo")
    assert d.fmt == "prompt" and d.dataset[:] == {"prompt": ["What is 2+2?", "What is 3+3?"], "answer": ["4", "6"]}
    sft = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "id": 1}]
    d = load_dataset_rows(_file(tmp_path, sft), objective="grpo")
    assert d.fmt == "conversation" and d.dataset[0] == {"prompt": [{"role": "user", "content": "hi"}], "id": 1}


@pytest.mark.parametrize("rows, problem", [
    ([{"text": "x"}], "prompts.jsonl:1: unknown shape"),
    ([{"prompt": "a", "answer": "1"}, {"prompt": "b"}], "prompts.jsonl:2: this row's fields are prompt a string but"),
    ([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": 2}], "prompts.jsonl:2: .*answer a number"),
    ([{"prompt": "  "}], "prompts.jsonl:1: empty 'prompt'"),
    ([{"prompt": "a", "completion": "b"}], "prompts.jsonl:1: column 'completion' is filled by the trainer"),
    ([{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "assistant", "content": "c"}]}], "prompts.jsonl:1: 'messages' must end with a user"),
])
def test_bad_prompt_rows_name_file_and_line(tmp_path, rows, problem):
    with pytest.raises(BadInput, match=problem):
        load_dataset_rows(_file(tmp_path, rows), objective="grpo")


def test_skip_bad_rows_counts_them(tmp_path):
    d = load_dataset_rows(_file(tmp_path, [{"prompt": "a"}, {"prompt": 3}, {"prompt": "b"}]), objective="grpo",
                          skip_bad_rows=True)
    assert d.n_rows == 2 and d.n_bad == 1 and "prompts.jsonl:2" in d.bad_examples[0]
