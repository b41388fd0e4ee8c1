"""A run whose prompts fill sequence_len trains nothing (every label masked): refused, not billed at loss 0;
many such rows are said."""

from __future__ import annotations

import pytest
from datasets import Dataset

from cheaptune.errors import BadInput
from cheaptune.train.trainer import SCAN_ROWS, check_trained_tokens


def _rows(labels: list[list[int]]) -> Dataset:
    return Dataset.from_dict({"input_ids": [[1] * len(r) for r in labels], "labels": labels})


def test_data_with_no_answer_token_in_the_loss_is_refused():
    with pytest.raises(BadInput, match="within sequence_len 64.*raise sequence_len"):
        check_trained_tokens(_rows([[-100, -100, -100]] * 600), 64)


def test_many_rows_that_train_nothing_are_said_and_a_few_are_not():
    # the demo's data on a tiny tokenizer at --seq-len 64: 291 of 300 packed rows had every label masked
    line = check_trained_tokens(_rows([[-100, -100]] * 291 + [[-100, 7]] * 9), 64)
    assert line.startswith("warning: 291 of 300 training rows (97%)") and "--seq-len" in line
    assert check_trained_tokens(_rows([[-100, -100]] * 5 + [[-100, 7]] * 95), 64) is None
    assert check_trained_tokens(Dataset.from_dict({"input_ids": [[1, 2]]}), 64) is None  # no mask: all tokens train


def test_a_large_set_is_judged_on_its_first_rows_unless_none_of_them_trains():
    first_trains = _rows([[5, -100]] * SCAN_ROWS + [[-100, -100]] * SCAN_ROWS)
    assert check_trained_tokens(first_trains, 64) is None  # stopped after SCAN_ROWS
    late = _rows([[-100, -100]] * (SCAN_ROWS + 10) + [[-100, 7]])
    assert "2058 of 2059" in check_trained_tokens(late, 64)  # read on until one trains
