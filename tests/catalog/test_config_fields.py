"""A model config.json whose fields are wrong is one line (exit 2), never a transformers traceback."""

from __future__ import annotations

import json

import pytest

from cheaptune.catalog.models import read_config
from cheaptune.errors import BadInput
from cheaptune.estimate.memory.compute import hf_config

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512}


def _write(tmp_path, **fields) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, **fields}))
    return str(path)


@pytest.mark.parametrize(("field", "value"), [
    ("hidden_size", "64"), ("hidden_size", 64.5), ("num_hidden_layers", True), ("num_hidden_layers", 0),
    ("num_hidden_layers", -1), ("vocab_size", 0), ("num_attention_heads", None),
])
def test_a_size_that_is_no_positive_integer_is_said_with_the_file(tmp_path, field, value):
    _write(tmp_path, **{field: value})
    with pytest.raises(BadInput, match=rf"config\.json: config\.{field} must be a positive integer \(got "):
        read_config(tmp_path / "config.json")


def test_a_model_type_that_is_no_name_is_said(tmp_path):
    _write(tmp_path, model_type=["llama"])
    with pytest.raises(BadInput, match=r"config\.model_type must be a model type name like \"llama\""):
        read_config(tmp_path / "config.json")


@pytest.mark.parametrize(("fields", "said"), [
    ({"hidden_size": 66}, "The hidden size (66) is not a multiple of the number of attention heads (4)"),
    ({"tie_word_embeddings": "yes"}, "Field 'tie_word_embeddings' expected bool"),
    ({"rope_scaling": "linear"}, "Field 'rope_parameters'"),
    ({"torch_dtype": "float13"}, "no attribute 'float13'"),
])
def test_fields_transformers_refuses_are_one_line_from_estimate(run_cli, tmp_path, fields, said):
    """They ended in transformers' own exception (a traceback); a known model_type with a bad field is not
    custom code either, so it is not estimated by the formula instead."""
    code, _, err = run_cli("estimate", "--model", _write(tmp_path, **fields), "--method", "lora", "--micro-batch",
                           "1", "--seq-len", "64", "--json")
    assert code == 2 and "transformers refuses its config (" in err and said in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_unknown_model_type_is_still_custom_code():
    assert hf_config({**TINY, "model_type": "not-a-transformers-type"}) is None


def test_a_plan_of_such_a_config_ends_in_one_line_with_no_dangling_advice(run_cli, tmp_path):
    """Bad input, so exit 2 (d4afd81: it was the planner's 'no feasible option', exit 3)."""
    code, _, err = run_cli("plan", _write(tmp_path, hidden_size=66), "--tokens", "1e6", "--gpu", "H100",
                           "--method", "lora")
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "transformers refuses its config" in lines[0], err
    assert "allow more" not in err
    assert not lines[0].rstrip().endswith("To make it feasible:")
