"""Preference rows (for DPO and ORPO): recognise the common layouts and turn each into trl's preference columns.

Output: explicit `prompt` + `chosen` + `rejected`, either all strings (trl's standard preference format,
no chat template) or all turn lists (conversational: `prompt` the turns before the reply, `chosen` and
`rejected` one assistant turn each). One shape per file, so a dataset has one Arrow schema.

Accepted layouts:
- preference: `prompt`, `chosen`, `rejected` as strings or turn lists. UltraFeedback-binarized rows, whose
  `chosen`/`rejected` conversations repeat the prompt turns, take those turns as the prompt;
- hh: Anthropic HH, `chosen` and `rejected` only, as "\\n\\nHuman: ...\\n\\nAssistant: ..." transcripts
  or turn lists; the prompt is the conversation they share before the last reply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cheaptune.data.formats import RowProblem, json_object, resolve_name, shapes_line, turn_list

SHAPES = {
    "preference": '{"prompt": ..., "chosen": ..., "rejected": ...} (strings or lists of {"role", "content"})',
    "hh": '{"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": "..."} (or turn lists)',
}
ALIASES = {"dpo": "preference", "orpo": "preference", "ultrafeedback": "preference", "chatml.ultra": "preference",
           "prompt_chosen_rejected": "preference", "anthropic_hh": "hh", "hh-rlhf": "hh", "chosen_rejected": "hh"}
HH_TURN = re.compile(r"\n\n(Human|Assistant):[ ]?")
HH_ROLES = {"Human": "user", "Assistant": "assistant"}
Turns = list[dict[str, str]]


def accepted_shapes() -> str:
    return shapes_line(SHAPES)


def resolve_format(name: str) -> str:
    return resolve_name(name, SHAPES, ALIASES, "preference dataset format")


def detect(row: Mapping[str, Any]) -> str:
    if row.get("chosen") is None or row.get("rejected") is None:
        raise RowProblem(f"unknown shape: keys {sorted(row)[:8]} have no 'chosen' and 'rejected'; preference "
                         f"training needs pairs: {accepted_shapes()}")
    return "preference" if row.get("prompt") is not None else "hh"


def normalize(fmt: str, row: Any) -> dict[str, Any]:
    row = json_object(row)
    out = _explicit(row) if fmt == "preference" else _implicit(row)
    if out["chosen"] == out["rejected"]:
        raise RowProblem("'chosen' and 'rejected' are the same answer (nothing to prefer)")
    return out


def shape(row: Mapping[str, Any]) -> str:
    """'strings' or 'turn lists': the Arrow schema a normalised row needs."""
    return "turn lists" if isinstance(row["chosen"], list) else "strings"


def features(row_shape: str) -> Any:
    from datasets import Features, Value

    if row_shape == "strings":
        return Features({k: Value("string") for k in ("prompt", "chosen", "rejected")})
    turn = [{"role": Value("string"), "content": Value("string")}]
    return Features({"prompt": turn, "chosen": turn, "rejected": turn})


def _explicit(row: Mapping[str, Any]) -> dict[str, Any]:
    prompt, chosen, rejected = row.get("prompt"), row.get("chosen"), row.get("rejected")
    if all(isinstance(v, str) for v in (prompt, chosen, rejected)):
        for key in ("chosen", "rejected"):
            if not row[key].strip():
                raise RowProblem(f"empty '{key}'")
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    if isinstance(prompt, str):
        prompt_turns = [{"role": "user", "content": prompt}]
    else:
        prompt_turns = turn_list(prompt, "prompt", expected="a string or a list of turns")
    pairs = [_conversation(row.get(k), k) for k in ("chosen", "rejected")]
    (c_prefix, c_reply), (r_prefix, r_reply) = pairs
    if c_prefix != r_prefix:
        raise RowProblem("'chosen' and 'rejected' differ before their last reply; they must answer the same prompt")
    return {"prompt": c_prefix or prompt_turns, "chosen": [c_reply], "rejected": [r_reply]}


def _implicit(row: Mapping[str, Any]) -> dict[str, Any]:
    pairs = [_conversation(_hh_turns(row.get(k), k) if isinstance(row.get(k), str) else row.get(k), k)
             for k in ("chosen", "rejected")]
    (c_prefix, c_reply), (r_prefix, r_reply) = pairs
    if not c_prefix:
        raise RowProblem("'chosen' has no prompt turns before its reply; give a 'prompt' field")
    if c_prefix != r_prefix:
        raise RowProblem("'chosen' and 'rejected' differ before their last reply; they must share the conversation")
    return {"prompt": c_prefix, "chosen": [c_reply], "rejected": [r_reply]}


def _hh_turns(text: str, key: str) -> Turns:
    """An HH transcript -> turns; text before the first 'Human:' marker makes the row bad."""
    parts = HH_TURN.split(text)
    if parts[0].strip() or len(parts) < 3:
        raise RowProblem(f"'{key}' is not an HH transcript (\"\\n\\nHuman: ...\\n\\nAssistant: ...\")")
    return [{"role": HH_ROLES[role], "content": content} for role, content in zip(parts[1::2], parts[2::2], strict=True)]


def _conversation(value: Any, key: str) -> tuple[Turns, dict[str, str]]:
    """(turns before the last reply, the reply): a bare string is the reply alone."""
    if isinstance(value, str):
        if not value.strip():
            raise RowProblem(f"empty '{key}'")
        return [], {"role": "assistant", "content": value}
    turns = turn_list(value, key, expected="a string or a list of turns")
    last = turns[-1] if turns else None
    if last is None or last["role"] != "assistant" or not last["content"].strip():
        raise RowProblem(f"'{key}' must end with an assistant turn with text")
    return turns[:-1], last


