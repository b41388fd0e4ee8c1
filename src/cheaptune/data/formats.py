"""Row formats: how to recognise each shape by its keys and turn a row into trl's SFT columns.

Outputs (one shape per format, so a dataset has one Arrow schema):
- messages, sharegpt -> `messages`: [{role, content}] (conversational language modelling);
- alpaca -> conversational `prompt` [user turn] + `completion` [assistant turn]: the chat template
  applies and trl puts the loss on the completion only, whatever markers the template has;
- prompt_completion -> `prompt` + `completion` strings (trl's standard prompt-completion);
- text -> `text`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean


class RowProblem(ValueError):
    """One row is unusable; the loader prefixes the file and line."""


@dataclass(frozen=True)
class Format:
    name: str
    shape: str  # the accepted shape, for error messages
    keys: tuple[str, ...]  # all present -> this format matches
    normalize: Callable[[Mapping[str, Any]], dict[str, Any]]


OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
                "tool": "tool"}
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "model": "assistant", "tool": "tool", "function": "tool",
                  "observation": "tool"}


def kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object",
            str: "a string"}.get(type(value), type(value).__name__)


def _text(row: Mapping[str, Any], key: str, needs: str, required: bool = True, empty_ok: bool = False) -> str:
    value = row.get(key)
    if value is None:
        if required:
            raise RowProblem(f"missing '{key}' ({needs})")
        return ""
    if not isinstance(value, str):
        raise RowProblem(f"'{key}' is {kind(value)}, expected a string")
    if required and not empty_ok and not value.strip():
        raise RowProblem(f"empty '{key}'")
    return value


def turn_list(value: Any, key: str, role_key: str = "role", content_key: str = "content",
              roles: Mapping[str, str] = OPENAI_ROLES, expected: str = "a list of turns") -> list[dict[str, str]]:
    """The message rules, in one place: a list of turns, each an object with a known role and string
    content; roles mapped to OpenAI's. `expected` names what else the field may be, for the message."""
    if value is None:
        raise RowProblem(f"missing '{key}'")
    if not isinstance(value, list):
        raise RowProblem(f"'{key}' is {kind(value)}, expected {expected}")
    out = []
    for i, turn in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(turn, Mapping):
            raise RowProblem(f"{where} is {kind(turn)}, expected an object with '{role_key}' and '{content_key}'")
        role = turn.get(role_key)
        if not isinstance(role, str):
            raise RowProblem(f"{where} has no '{role_key}' string")
        if role.lower() not in roles:
            accepted = ", ".join(sorted(set(roles)))
            raise RowProblem(f"{where}: unknown role '{role}' (use one of {accepted})")
        content = turn.get(content_key)
        if not isinstance(content, str):
            raise RowProblem(f"{where}.{content_key} is {kind(content)}, expected a string")
        out.append({"role": roles[role.lower()], "content": content})
    return out


def _turns(value: Any, key: str, role_key: str, content_key: str, roles: dict[str, str]) -> list[dict[str, str]]:
    """A conversation to train on: the message rules, and an assistant turn with text."""
    out = turn_list(value, key, role_key, content_key, roles)
    if not any(t["role"] == "assistant" and t["content"].strip() for t in out):
        raise RowProblem(f"'{key}' has no assistant turn with text (nothing to learn from)")
    return out


def _messages(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"messages": _turns(row.get("messages"), "messages", "role", "content", OPENAI_ROLES)}


def _sharegpt(row: Mapping[str, Any]) -> dict[str, Any]:
    conv = row.get("conversations")
    # Some "sharegpt" exports already use role/content inside `conversations`; accept both.
    first = conv[0] if isinstance(conv, list) and conv and isinstance(conv[0], Mapping) else {}
    keys = ("role", "content") if "role" in first and "from" not in first else ("from", "value")
    return {"messages": _turns(conv, "conversations", *keys, roles=SHAREGPT_ROLES)}


def _alpaca(row: Mapping[str, Any]) -> dict[str, Any]:
    needs = "alpaca rows need instruction and output"
    instruction = _text(row, "instruction", needs)
    output = _text(row, "output", needs)
    extra = _text(row, "input", needs, required=False)
    system = _text(row, "system", needs, required=False)
    user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    prompt = ([{"role": "system", "content": system}] if system.strip() else []) + [{"role": "user", "content": user}]
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": output}]}


def _prompt_completion(row: Mapping[str, Any]) -> dict[str, Any]:
    needs = "prompt/completion rows need both"
    return {"prompt": _text(row, "prompt", needs, empty_ok=True), "completion": _text(row, "completion", needs)}


def _plain_text(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"text": _text(row, "text", "text rows need a 'text' string")}


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("messages", '{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}',
               ("messages",), _messages),
        Format("sharegpt", '{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}',
               ("conversations",), _sharegpt),
        Format("alpaca", '{"instruction": ..., "input": ... (optional), "output": ...}',
               ("instruction",), _alpaca),
        Format("prompt_completion", '{"prompt": ..., "completion": ...}', ("prompt", "completion"),
               _prompt_completion),
        Format("text", '{"text": ...}', ("text",), _plain_text),
    )
}
# Other spellings users bring, chiefly Axolotl's dataset `type` names.
ALIASES = {"openai": "messages", "chat_template": "messages", "chatml": "messages", "conversations": "sharegpt",
           "completion": "text", "pretraining": "text", "prompt-completion": "prompt_completion"}


def shapes_line(shapes: Mapping[str, str]) -> str:
    """'name: shape; ...' for the messages of SFT, preference and prompt rows alike."""
    return "; ".join(f"{name}: {shape}" for name, shape in shapes.items())


def accepted_shapes() -> str:
    return shapes_line({f.name: f.shape for f in FORMATS.values()})


def resolve_name(name: str, canonical: Mapping[str, Any], aliases: Mapping[str, str], what: str) -> str:
    """A format name or alias -> the canonical name; 'auto' stays 'auto'. One rule for every row family;
    `what` names the family in the error ("dataset format", "preference dataset format")."""
    key = name.strip().lower()
    if key == "auto" or key in canonical:
        return key
    if key in aliases:
        return aliases[key]
    raise BadInput(f"unknown {what} '{name}'{did_you_mean(name, ['auto', *canonical, *aliases])}; use auto or "
                   f"one of {', '.join(canonical)}")


def resolve_format(name: str) -> str:
    return resolve_name(name, FORMATS, ALIASES, "dataset format")


def detect(row: Mapping[str, Any]) -> str:
    """The format whose keys the row has. A `text` column beside a structured one (alpaca dumps carry
    a rendered `text`) does not count as ambiguous; two structured shapes do."""
    hits = [f.name for f in FORMATS.values() if all(k in row and row[k] is not None for k in f.keys)]
    structured = [h for h in hits if h != "text"]
    if len(structured) > 1:
        raise RowProblem(f"ambiguous shape: keys {sorted(row)} match {' and '.join(structured)}; "
                         f"choose one with --format (dataset type) {'|'.join(structured)}")
    if hits:
        return (structured or hits)[0]
    raise RowProblem(f"unknown shape: keys {sorted(row)[:8]} match no accepted format; accepted: {accepted_shapes()}")


def json_object(row: Any) -> Mapping[str, Any]:
    """The row itself when it is a JSON object (every family's rows are); RowProblem otherwise."""
    if not isinstance(row, Mapping):
        raise RowProblem(f"row is {kind(row)}, expected a JSON object")
    return row


def normalize(fmt: str, row: Any) -> dict[str, Any]:
    return FORMATS[fmt].normalize(json_object(row))
