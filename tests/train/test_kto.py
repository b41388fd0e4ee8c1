"""KTO through trl on the tiny Llama: rated single completions train an adapter with atomic checkpoints, and bad
rows or settings are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from cheaptune.errors import BadInput
from cheaptune.train.config import validate
from tests.train.conftest import write_jsonl

ADAPTER = "adapter_model.safetensors"


def rated_rows(n: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"What is {i} plus {i}?"}],
             "completion": [{"role": "assistant", "content": f"The answer is {2 * i if i % 2 else i}."}],
             "label": bool(i % 2)} for i in range(n)]


@pytest.fixture(scope="module")
def rated_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("kto") / "rated.jsonl", rated_rows(8))


def test_kto_trains_an_adapter(tiny_model_dir, rated_file, tmp_path, run_cli):
    out = tmp_path / "out"
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(rated_file), "-o", str(out),
                           "--objective", "kto", "--max-steps", "2", "--micro-batch", "2", "--seq-len", "64",
                           "--save-steps", "1", "--lr", "1e-3", "--device", "cpu", "--probe-steps", "0")
    assert code == 0, err
    first, last = load_file(out / "checkpoint-1" / ADAPTER), load_file(out / "checkpoint-2" / ADAPTER)
    assert any(not first[k].equal(last[k]) for k in first), "no adapter weight changed"


def test_bad_kto_rows_and_settings_are_one_line(tiny_model_dir, tmp_path, run_cli):
    with pytest.raises(BadInput, match="kto needs micro_batch_size 2"):
        validate({"objective": "kto"})
    rows = [*rated_rows(2), {"prompt": "p", "completion": "c", "label": "maybe"}]
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(write_jsonl(tmp_path / "r.jsonl", rows)),
                           "-o", str(tmp_path / "o"), "--objective", "kto", "--micro-batch", "2", "--device", "cpu")
    assert code == 2 and "r.jsonl:3: 'label' is 'maybe'" in err, err
