"""Verifiable rewards for GRPO, as the callables trl's GRPOTrainer takes, and a user's reward file.

Each reward is `f(prompts, completions, **columns) -> list[float]`, one score per completion; trl sums
them with the configured weights. Completions arrive as strings (standard prompts) or as a list of one
assistant turn (conversational prompts); `text()` reads both.

A user's file is imported only from the path the config names (never found on sys.path) and must define
`reward(prompts, completions, **columns)`. It receives the dataset's columns only, not trl's extras
(trainer_state, log hooks, completion_ids), so the signature stays the one documented. Its failures
become one BadInput line naming the file and the training row.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.train.grpo_options import GrpoFields, RewardSpec

Reward = Callable[..., list[float]]
ROW = "_cheaptune_row"  # the row number column the GRPO trainer adds (1 = first), for error messages
TRL_EXTRAS = ("trainer_state", "log_extra", "log_metric", "environments", "completion_ids", ROW)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_ANSWER = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*", re.IGNORECASE)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def text(completion: Any) -> str:
    """A completion's text: the string itself, or the content of its assistant turn(s)."""
    if isinstance(completion, str):
        return completion
    return "".join(turn.get("content") or "" for turn in completion)


def final_answer(completion: str) -> str:
    r"""The final answer in a completion: the last \boxed{...}, else what follows the last '####' or
    'answer is'/'answer:', else the last non-empty line; trailing full stop and spaces dropped."""
    boxed = _BOXED.findall(completion)
    if boxed:
        return boxed[-1].strip()
    marked = list(_ANSWER.finditer(completion))
    if "####" in completion:
        lines = _lines(completion.rsplit("####", 1)[1])[:1]
    elif marked:
        lines = _lines(completion[marked[-1].end():])[:1]
    else:
        lines = _lines(completion)[-1:]
    return lines[0].rstrip(". ").strip() if lines else ""


def _lines(chunk: str) -> list[str]:
    return [x.strip() for x in chunk.splitlines() if x.strip()]


def _norm(value: Any) -> str:
    return " ".join(str(value).split()).casefold()


def exact_match(column: str) -> Reward:
    """1 when the completion's final answer equals the row's `column` (case and spacing ignored), else 0."""
    def exact_match(prompts, completions, **columns) -> list[float]:
        truth = _column(columns, column, "exact_match")
        return [float(_norm(final_answer(text(c))) == _norm(t)) for c, t in zip(completions, truth, strict=True)]
    return exact_match


def number_in(answer: str) -> float | None:
    """The last number in an answer ('1,234.5' -> 1234.5), None when there is none."""
    found = _NUMBER.findall(answer)
    return float(found[-1].replace(",", "")) if found else None


def numeric(column: str, tolerance: float) -> Reward:
    """1 when the last number of the final answer is within `tolerance` of the row's `column`, else 0."""
    def numeric(prompts, completions, **columns) -> list[float]:
        out = []
        for c, t in zip(completions, _column(columns, column, "numeric"), strict=True):
            got, want = number_in(final_answer(text(c))), _to_float(t, column)
            out.append(float(got is not None and math.isfinite(got) and abs(got - want) <= tolerance))
        return out
    return numeric


def regex(pattern: str) -> Reward:
    """1 when `pattern` matches anywhere in the completion (re.search, DOTALL), else 0: anchor it to demand
    a whole format."""
    compiled = re.compile(pattern, re.DOTALL)

    def regex(prompts, completions, **columns) -> list[float]:
        return [float(compiled.search(text(c)) is not None) for c in completions]
    return regex


def parse_json(completion: str) -> Any:
    """The JSON value of a completion (a ```json fence around it allowed); raises ValueError if none."""
    body = completion.strip()
    fenced = _FENCE.match(body)
    return json.loads(fenced.group(1) if fenced else body)


def json_valid(keys: Sequence[str]) -> Reward:
    """0 when the completion is not JSON; 0.5 for JSON, plus 0.5 x the share of `keys` an object has (1.0
    for valid JSON when no keys are required). Graded, so a group of rollouts differs and GRPO learns."""
    def json(prompts, completions, **columns) -> list[float]:
        out = []
        for c in completions:
            try:
                value = parse_json(text(c))
            except ValueError:
                out.append(0.0)
                continue
            if not keys:
                out.append(1.0)
                continue
            present = sum(k in value for k in keys) if isinstance(value, dict) else 0
            out.append(0.5 + 0.5 * present / len(keys))
        return out
    return json


def length_penalty(target: int) -> Reward:
    """0 up to `target` completion tokens, then -(tokens - target) / target, at least -1."""
    def length(prompts, completions, completion_ids=None, **columns) -> list[float]:
        sizes = [len(ids) for ids in completion_ids] if completion_ids is not None else \
            [len(text(c).split()) for c in completions]
        return [-min(1.0, max(0, n - target) / target) for n in sizes]
    return length


def user_reward(path: str) -> Reward:
    """The `reward` function of the user's file at `path`, wrapped so each failure is one clear line."""
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"reward file {path} not found; give the path of a .py file defining "
                       "reward(prompts, completions, **columns)")
    spec = importlib.util.spec_from_file_location(f"cheaptune_user_reward_{abs(hash(file.resolve()))}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise BadInput(f"reward file {path} failed to import: {type(err).__name__}: {err}") from None
    fn = getattr(module, "reward", None)
    if not callable(fn):
        raise BadInput(f"reward file {path} defines no function reward(prompts, completions, **columns)")

    def call(prompts, completions, **columns) -> list[float]:
        rows = columns.get(ROW) or list(range(1, len(completions) + 1))
        data = {k: v for k, v in columns.items() if k not in TRL_EXTRAS}
        try:
            scores = list(fn(prompts, completions, **data))
        except Exception as batch_err:
            row, err = _failing_row(fn, prompts, completions, data, rows, batch_err)
            raise BadInput(f"reward file {path}: reward() failed on training row {row}: {err}") from None
        if len(scores) != len(completions):
            raise BadInput(f"reward file {path}: reward() returned {len(scores)} scores for {len(completions)} "
                           "completions; return one float per completion")
        for i, s in enumerate(scores):
            if s is not None and not isinstance(s, (int, float)):
                raise BadInput(f"reward file {path}: reward() returned {type(s).__name__} for training row "
                               f"{rows[i]}; return floats (or None to skip one)")
        return scores

    call.__name__ = file.stem
    return call


def build_rewards(cfg: GrpoFields) -> tuple[list[Reward], list[float]]:
    """The reward callables and their weights, from the config's `reward` (in its order)."""
    specs: list[RewardSpec] = cfg.reward_specs()
    return [_one(s.name, cfg) for s in specs], [s.weight for s in specs]


def _one(name: str, cfg: GrpoFields) -> Reward:
    if name == "exact_match":
        return exact_match(cfg.answer_column)
    if name == "numeric":
        return numeric(cfg.answer_column, cfg.reward_tolerance)
    if name == "regex":
        return regex(cfg.reward_pattern or "")
    if name == "json":
        return json_valid(cfg.reward_json_keys)
    if name == "length":
        return length_penalty(cfg.reward_target_length)
    return user_reward(name)


def check_columns(cfg: GrpoFields, columns: Sequence[str], where: str) -> None:
    """Refuse, before any model loads, data without the column a reward reads."""
    needs = {s.name for s in cfg.reward_specs()} & {"exact_match", "numeric"}
    if needs and cfg.answer_column not in columns:
        raise BadInput(f"{where}: reward {' and '.join(sorted(needs))} reads column '{cfg.answer_column}', which "
                       f"the data does not have (columns: {', '.join(columns)}); set answer_column")


def _column(columns: dict[str, Any], name: str, reward: str) -> list[Any]:
    if name not in columns:
        raise BadInput(f"reward {reward} reads column '{name}', which the data does not have; set answer_column")
    return columns[name]


def _to_float(value: Any, column: str) -> float:
    number = value if isinstance(value, (int, float)) else number_in(str(value))
    if number is None:
        raise BadInput(f"reward numeric: column '{column}' holds {value!r}, not a number")
    return float(number)


def _failing_row(fn: Reward, prompts, completions, data: dict[str, Any], rows: list[int],
                 batch_err: Exception) -> tuple[int, str]:
    """Re-run one completion at a time to name the row whose reward raised, and the error it raised (the
    first row and the batch's error when no single row fails alone)."""
    for i in range(len(completions)):
        one = {k: v[i : i + 1] if isinstance(v, list) else v for k, v in data.items()}
        try:
            fn(prompts[i : i + 1], completions[i : i + 1], **one)
        except Exception as err:
            return rows[i], f"{type(err).__name__}: {err}"
    return rows[0], f"{type(batch_err).__name__}: {batch_err}"
