"""Helpers to write small dataset files in every supported shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


ALPACA = [{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
          {"instruction": "Say hi.", "input": "", "output": "Hi!"}]
SHAREGPT = [{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                               {"from": "gpt", "value": "Hello."}]}]
MESSAGES = [{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}]
PROMPT_COMPLETION = [{"prompt": "The sky is", "completion": " blue."}]
TEXT = [{"text": "Once upon a time."}, {"text": "The end."}]


@pytest.fixture
def jsonl(tmp_path):
    def _write(rows: list, name: str = "data.jsonl") -> Path:
        return write_jsonl(tmp_path / name, rows)

    return _write
