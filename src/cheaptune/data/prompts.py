"""Prompt rows (for GRPO): a prompt to sample completions from, plus the columns the rewards read.

Output: `prompt`, a string (trl's standard format, no chat template) or a turn list (conversational: the
template applies at generation), and every other key of the row unchanged (`answer`, ...), which trl hands
to the reward functions as keyword arguments. One shape per file (the prompt's kind and each column's
kind), so a dataset has one Arrow schema and a row missing a column is a bad row with its line.

Accepted layouts:
- prompt: `prompt` as a string or a list of turns;
- conversation: `messages` turns; a final assistant turn (an SFT row's reply) is dropped, the prompt is the
  turns before it, so an SFT file serves as GRPO prompts. (Not named `messages`: the trainer reads that
  format name as SFT rows still holding their replies.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cheaptune.data.formats import RowProblem, json_object, kind, resolve_name, shapes_line, turn_list

SHAPES = {
    "prompt": '{"prompt": "..." or [{"role", "content"}], ...the columns your rewards read}',
    "conversation": '{"messages": [{"role": "user", "content": "..."}, ...], ...the columns your rewards read}',
}
ALIASES = {"grpo": "prompt", "prompts": "prompt", "chat": "conversation", "messages": "conversation"}
RESERVED = ("completion", "completion_ids")  # trl fills these itself: a data column of that name would be lost


def accepted_shapes() -> str:
    return shapes_line(SHAPES)


def resolve_format(name: str) -> str:
    return resolve_name(name, SHAPES, ALIASES, "prompt dataset format")


def detect(row: Mapping[str, Any]) -> str:
    if row.get("prompt") is not None:
        return "prompt"
    if row.get("messages") is not None:
        return "conversation"
    raise RowProblem(f"unknown shape: keys {sorted(row)[:8]} have no 'prompt' or 'messages'; GRPO samples "
                     f"completions from prompts: {accepted_shapes()}")


def normalize(fmt: str, row: Any) -> dict[str, Any]:
    row = json_object(row)
    for key in RESERVED:
        if key in row:
            raise RowProblem(f"column '{key}' is filled by the trainer with what the model generates; rename it")
    rest = {k: v for k, v in row.items() if k not in ("prompt", "messages")}
    return {"prompt": _prompt(row) if fmt == "prompt" else _from_messages(row), **rest}


def shape(fmt: str, row: dict[str, Any]) -> str:
    """The prompt's kind and each column's, e.g. "answer a string, prompt a list": one per file."""
    return ", ".join(f"{key} {kind(row[key])}" for key in sorted(row))


def features(row_shape: str) -> None:
    """None: datasets infers the schema; `shape` already holds every row of a file to one kind per column."""
    return None


def _prompt(row: Mapping[str, Any]) -> str | list[dict[str, str]]:
    value = row.get("prompt")
    if isinstance(value, str):
        if not value.strip():
            raise RowProblem("empty 'prompt'")
        return value
    turns = turn_list(value, "prompt", expected="a string or a list of turns")
    if not turns:
        raise RowProblem("'prompt' has no turns")
    return turns


def _from_messages(row: Mapping[str, Any]) -> list[dict[str, str]]:
    turns = turn_list(row.get("messages"), "messages")
    if turns and turns[-1]["role"] == "assistant":
        turns = turns[:-1]  # an SFT row's reply: the model is to generate it
    if not turns or turns[-1]["role"] not in ("user", "tool"):
        raise RowProblem("'messages' must end with a user turn (or a user turn then the assistant reply, "
                         "which is dropped)")
    return turns
