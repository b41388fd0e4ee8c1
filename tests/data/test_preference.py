"""Preference pairs (DPO, ORPO): every accepted layout normalised to trl's columns; bad rows named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheaptune.data import load_dataset_rows
from cheaptune.errors import BadInput

HH = "\n\nHuman: What is 2+2?\n\nAssistant: "
USER = [{"role": "user", "content": "What is 2+2?"}]


def _write(tmp_path: Path, rows: list, name: str = "pairs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _reply(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("row, fmt, expected", [
    ({"prompt": "2+2=", "chosen": "4", "rejected": "5"}, "preference",
     {"prompt": "2+2=", "chosen": "4", "rejected": "5"}),
    ({"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}, "preference",
     {"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}),
    ({"prompt": USER, "chosen": "4", "rejected": "5"}, "preference",  # list prompt, string replies
     {"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}),
    # UltraFeedback binarized: the prompt string, and conversations that repeat it
    ({"prompt": "What is 2+2?", "chosen": USER + _reply("4"), "rejected": USER + _reply("5"), "score_chosen": 9.0},
     "preference", {"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}),
    ({"chosen": HH + "4", "rejected": HH + "5"}, "hh",  # Anthropic HH transcripts
     {"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}),
    ({"chosen": USER + _reply("4"), "rejected": USER + _reply("5")}, "hh",
     {"prompt": USER, "chosen": _reply("4"), "rejected": _reply("5")}),
])
def test_layouts_normalise_to_trl_preference_columns(tmp_path, row, fmt, expected):
    loaded = load_dataset_rows(_write(tmp_path, [row, row]), objective="dpo")
    assert loaded.fmt == fmt and loaded.n_rows == 2
    assert loaded.dataset[0] == expected
    assert loaded.dataset.column_names == ["prompt", "chosen", "rejected"]


def test_multi_turn_hh_keeps_the_shared_conversation_as_prompt(tmp_path):
    talk = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: 2+2?\n\nAssistant: "
    row = load_dataset_rows(_write(tmp_path, [{"chosen": talk + "4", "rejected": talk + "5"}]), objective="orpo")
    assert [t["role"] for t in row.dataset[0]["prompt"]] == ["user", "assistant", "user"]
    assert row.dataset[0]["chosen"] == _reply("4")


@pytest.mark.parametrize("row, problem", [
    ({"prompt": "p", "chosen": "same", "rejected": "same"}, "are the same answer"),
    ({"prompt": "p", "chosen": "4"}, "missing 'rejected'"),
    ({"prompt": "p", "chosen": "", "rejected": "5"}, "empty 'chosen'"),
    ({"prompt": "p", "chosen": 4, "rejected": "5"}, "'chosen' is a number"),
    ({"chosen": "4", "rejected": "5"}, "not an HH transcript"),
    ({"chosen": HH + "4", "rejected": "\n\nHuman: other?\n\nAssistant: 5"}, "share the conversation"),
    ({"prompt": USER, "chosen": USER, "rejected": _reply("5")}, "must end with an assistant turn"),
    ({"prompt": USER, "chosen": [{"role": "robot", "content": "4"}], "rejected": "5"}, "unknown role 'robot'"),
    # the message rules of the messages format (data/formats.py turn_list), word for word
    ({"prompt": USER, "chosen": [{"content": "4"}], "rejected": "5"}, "chosen[0] has no 'role' string"),
    ({"prompt": USER, "chosen": [{"role": "assistant", "content": 4}], "rejected": "5"},
     "chosen[0].content is a number, expected a string"),
])
def test_bad_rows_name_file_line_and_problem(tmp_path, row, problem):
    good = {"prompt": "p", "chosen": "4", "rejected": "5"} if "prompt" in row else {"chosen": HH + "4", "rejected": HH + "5"}
    path = _write(tmp_path, [good, row])
    with pytest.raises(BadInput, match="--skip-bad-rows") as err:
        load_dataset_rows(path, objective="dpo")
    assert f"{path}:2:" in str(err.value) and problem in str(err.value)
    loaded = load_dataset_rows(path, objective="dpo", skip_bad_rows=True)
    assert (loaded.n_rows, loaded.n_bad) == (1, 1)


def test_one_shape_per_file(tmp_path):
    rows = [{"prompt": "p", "chosen": "4", "rejected": "5"}, {"prompt": USER, "chosen": _reply("4"), "rejected": "5"}]
    with pytest.raises(BadInput, match=r":2: this row's fields are turn lists but the first row's are strings"):
        load_dataset_rows(_write(tmp_path, rows), objective="dpo")


def test_sft_rows_are_refused_for_preference_training(tmp_path):
    path = _write(tmp_path, [{"messages": USER + _reply("4")}])
    with pytest.raises(BadInput, match=r":1: unknown shape.*preference training needs pairs"):
        load_dataset_rows(path, objective="dpo")


def test_unknown_preference_format_name_gets_did_you_mean(tmp_path):
    with pytest.raises(BadInput, match="did you mean"):
        load_dataset_rows(_write(tmp_path, [{"prompt": "p", "chosen": "4", "rejected": "5"}]), "prefrence",
                          objective="dpo")
    loaded = load_dataset_rows(_write(tmp_path, [{"chosen": HH + "4", "rejected": HH + "5"}]), "anthropic_hh",
                               objective="dpo")
    assert loaded.fmt == "hh"
