"""Unpaired feedback rows (for KTO): one completion per prompt with a thumbs up or down, trl's unpaired
preference format.

Output: `prompt`, `completion` and `label` (bool: True = desirable), prompt and completion either both
strings (standard) or both turn lists (conversational: `prompt` the turns before the reply, `completion` one
assistant turn). One shape per file, so a dataset has one Arrow schema. Labels may be booleans, 0/1, or the
strings "good"/"bad", "up"/"down", "true"/"false", "desirable"/"undesirable".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cheaptune.data.formats import RowProblem, kind, turn_list
from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean

SHAPE = '{"prompt": ..., "completion": ..., "label": true|false} (strings or lists of {"role", "content"})'
ALIASES = {"kto": "unpaired", "unpaired_preference": "unpaired", "thumbs": "unpaired"}
LABELS = {"true": True, "false": False, "good": True, "bad": False, "up": True, "down": False,
          "desirable": True, "undesirable": False, "1": True, "0": False}


def resolve_format(name: str) -> str:
    key = name.strip().lower()
    if key in ("auto", "unpaired"):
        return key
    if key in ALIASES:
        return ALIASES[key]
    raise BadInput(f"unknown feedback dataset format '{name}'{did_you_mean(name, ['auto', 'unpaired', *ALIASES])}; "
                   "use auto or unpaired")


def detect(row: Mapping[str, Any]) -> str:
    if all(row.get(k) is not None for k in ("prompt", "completion", "label")):
        return "unpaired"
    raise RowProblem(f"unknown shape: keys {sorted(row)[:8]} lack 'prompt', 'completion' or 'label'; KTO reads "
                     f"rated completions: {SHAPE}")


def normalize(fmt: str, row: Any) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise RowProblem(f"row is {kind(row)}, expected a JSON object")
    label = _label(row.get("label"))
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion.strip():
            raise RowProblem("empty 'completion'")
        return {"prompt": prompt, "completion": completion, "label": label}
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else \
        turn_list(prompt, "prompt", expected="a string or a list of turns")
    reply = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else \
        turn_list(completion, "completion", expected="a string or a list of turns")
    if len(reply) != 1 or reply[0]["role"] != "assistant" or not reply[0]["content"].strip():
        raise RowProblem("'completion' must be one assistant turn with text")
    return {"prompt": turns, "completion": reply, "label": label}


def shape(fmt: str, row: dict[str, Any]) -> str:
    return "turn lists" if isinstance(row["completion"], list) else "strings"


def features(row_shape: str) -> Any:
    from datasets import Features, Value

    if row_shape == "strings":
        return Features({"prompt": Value("string"), "completion": Value("string"), "label": Value("bool")})
    turn = [{"role": Value("string"), "content": Value("string")}]
    return Features({"prompt": turn, "completion": turn, "label": Value("bool")})


def _label(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in LABELS:
        return LABELS[value.strip().lower()]
    raise RowProblem(f"'label' is {value!r}; use true/false (or 1/0, good/bad, up/down)")
