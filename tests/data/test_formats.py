"""Every format loads into trl's columns; auto-detection; ambiguous and unknown shapes."""

from __future__ import annotations

import pytest

from cheaptune.data import load_dataset_rows, resolve_format
from cheaptune.errors import BadInput
from tests.data.conftest import ALPACA, MESSAGES, PROMPT_COMPLETION, SHAREGPT, TEXT


def test_alpaca_becomes_conversational_prompt_completion(jsonl):
    got = load_dataset_rows(jsonl(ALPACA))
    assert got.fmt == "alpaca" and got.n_rows == 2 and got.n_bad == 0
    row = got.dataset[0]
    assert row["prompt"] == [{"role": "user", "content": "Add the numbers.\n\n2 and 3"}]
    assert row["completion"] == [{"role": "assistant", "content": "5"}]
    assert got.dataset[1]["prompt"][0]["content"] == "Say hi."  # empty input adds nothing


def test_alpaca_system_field_is_a_system_turn(jsonl):
    got = load_dataset_rows(jsonl([{**ALPACA[0], "system": "Be exact."}]))
    assert [t["role"] for t in got.dataset[0]["prompt"]] == ["system", "user"]


def test_sharegpt_roles_map_to_openai(jsonl):
    got = load_dataset_rows(jsonl(SHAREGPT))
    assert got.fmt == "sharegpt"
    assert [t["role"] for t in got.dataset[0]["messages"]] == ["system", "user", "assistant"]
    assert got.dataset[0]["messages"][2]["content"] == "Hello."


def test_sharegpt_with_role_content_inside(jsonl):
    rows = [{"conversations": MESSAGES[0]["messages"]}]
    assert load_dataset_rows(jsonl(rows)).dataset[0]["messages"] == MESSAGES[0]["messages"]


def test_messages_prompt_completion_text(jsonl):
    assert load_dataset_rows(jsonl(MESSAGES)).dataset.column_names == ["messages"]
    pc = load_dataset_rows(jsonl(PROMPT_COMPLETION))
    assert pc.fmt == "prompt_completion" and pc.dataset[0] == PROMPT_COMPLETION[0]
    text = load_dataset_rows(jsonl(TEXT))
    assert text.fmt == "text" and text.dataset["text"] == ["Once upon a time.", "The end."]


def test_text_beside_a_structured_shape_is_not_ambiguous(jsonl):
    """Alpaca dumps carry a rendered `text` column; the structured shape wins."""
    got = load_dataset_rows(jsonl([{**ALPACA[0], "text": "### Instruction: ..."}]))
    assert got.fmt == "alpaca"


def test_explicit_format_and_axolotl_aliases(jsonl):
    assert load_dataset_rows(jsonl([{**ALPACA[0], "text": "x"}]), fmt="completion").fmt == "text"
    assert resolve_format("chat_template") == "messages"
    assert resolve_format("ShareGPT") == "sharegpt"


def test_unknown_format_name_suggests(jsonl):
    with pytest.raises(BadInput, match=r"unknown dataset format 'alpacca'.*did you mean alpaca"):
        load_dataset_rows(jsonl(ALPACA), fmt="alpacca")


def test_ambiguous_shape(jsonl):
    path = jsonl([{**MESSAGES[0], "prompt": "a", "completion": "b"}])
    with pytest.raises(BadInput, match=r"data.jsonl:1: ambiguous shape.*messages and prompt_completion"):
        load_dataset_rows(path)


def test_unknown_shape_lists_accepted(jsonl):
    with pytest.raises(BadInput) as err:
        load_dataset_rows(jsonl([{"question": "q", "answer": "a"}]))
    msg = str(err.value)
    assert "data.jsonl:1: unknown shape" in msg and "'answer'" in msg
    for name in ("messages", "sharegpt", "alpaca", "prompt_completion", "text"):
        assert name in msg
    assert "\n" not in msg
