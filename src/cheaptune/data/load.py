"""Load a dataset into trl's SFT or preference format, checking every row and naming the file and line of each
bad one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cheaptune.data.formats as formats
import cheaptune.data.preference as preference
import cheaptune.data.prompts as prompts
import cheaptune.data.unpaired as unpaired
from cheaptune.data.formats import RowProblem, kind
from cheaptune.data.readers import iter_rows
from cheaptune.errors import BadInput

CHUNK_ROWS = 10_000  # rows turned into Arrow at a time: bounds the Python objects alive at once
MAX_EXAMPLES = 5  # bad-row messages kept for the log


@dataclass
class LoadedData:
    dataset: Any  # datasets.Dataset with `messages` | `prompt`+`completion` | `text` | `prompt`+`chosen`+`rejected`
    fmt: str
    n_rows: int
    n_bad: int = 0
    bad_examples: list[str] = field(default_factory=list)


def _features(fmt: str) -> Any:
    """One fixed schema per format, so chunks always concatenate."""
    from datasets import Features, Value

    turn = {"role": Value("string"), "content": Value("string")}
    if fmt in ("messages", "sharegpt"):
        return Features({"messages": [turn]})
    if fmt == "alpaca":
        return Features({"prompt": [turn], "completion": [turn]})
    if fmt == "prompt_completion":
        return Features({"prompt": Value("string"), "completion": Value("string")})
    return Features({"text": Value("string")})


@dataclass(frozen=True)
class _Family:
    """The row formats of one training objective: names, detection, normalising, and the row's schema."""

    resolve: Callable[[str], str]
    detect: Callable[[Mapping[str, Any]], str]
    normalize: Callable[[str, Any], dict[str, Any]]
    shape: Callable[[str, dict[str, Any]], str]  # rows of one shape share one Arrow schema
    features: Callable[[str], Any]


_SFT = _Family(formats.resolve_format, formats.detect, formats.normalize, lambda fmt, row: fmt, _features)
_PREFERENCE = _Family(preference.resolve_format, preference.detect, preference.normalize,
                      lambda fmt, row: preference.shape(row), preference.features)
_PROMPTS = _Family(prompts.resolve_format, prompts.detect, prompts.normalize, prompts.shape, prompts.features)
_UNPAIRED = _Family(unpaired.resolve_format, unpaired.detect, unpaired.normalize, unpaired.shape, unpaired.features)


def load_dataset_rows(path: str | os.PathLike, fmt: str = "auto", skip_bad_rows: bool = False,
                      split: str | None = None, objective: str = "sft") -> LoadedData:
    """Read, detect the format (by the first row that is an object), normalise and check every row.

    Bad rows are all counted in one pass; without `skip_bad_rows` the first one is raised as BadInput
    with the count of the rest, so a user fixes a file in one round rather than one error at a time.
    `objective` dpo or orpo reads preference pairs (cheaptune.data.preference) instead of SFT rows, grpo
    prompts with the columns its rewards read (cheaptune.data.prompts).
    """
    from datasets import Dataset, concatenate_datasets

    family = {"sft": _SFT, "grpo": _PROMPTS, "kto": _UNPAIRED}.get(objective, _PREFERENCE)
    chosen = family.resolve(fmt)
    first_shape: str | None = None
    parts: list[Any] = []
    chunk: list[dict[str, Any]] = []
    n_rows = n_bad = 0
    bad: list[str] = []
    for where, raw in iter_rows(path, split):
        try:
            if isinstance(raw, RowProblem):
                raise raw
            if chosen == "auto" and isinstance(raw, Mapping):
                try:
                    chosen = family.detect(raw)
                except RowProblem as err:
                    raise BadInput(f"{where}: {err}") from None
            if chosen == "auto":
                raise RowProblem(f"row is {kind(raw)}, expected a JSON object")
            row = family.normalize(chosen, raw)
            first_shape = first_shape or family.shape(chosen, row)
            if family.shape(chosen, row) != first_shape:
                raise RowProblem(f"this row's fields are {family.shape(chosen, row)} but the first row's are "
                                 f"{first_shape}; use one shape per file")
        except RowProblem as err:
            n_bad += 1
            if len(bad) < MAX_EXAMPLES:
                bad.append(f"{where}: {err}")
            continue
        if n_bad and not skip_bad_rows:
            continue  # the load will fail: keep counting, stop building
        chunk.append(row)
        n_rows += 1
        if len(chunk) >= CHUNK_ROWS:
            parts.append(Dataset.from_list(chunk, features=family.features(first_shape)))
            chunk = []
    if n_bad and not skip_bad_rows:
        more = f" ({n_bad - 1} more bad row{'s' if n_bad > 2 else ''})" if n_bad > 1 else ""
        raise BadInput(f"{bad[0]}{more}; fix the data or pass --skip-bad-rows to skip and count them")
    if n_rows == 0:
        why = f"all {n_bad} rows are bad, first: {bad[0]}" if n_bad else "it has no rows"
        raise BadInput(f"dataset {path} has no usable rows: {why}")
    if chunk:
        parts.append(Dataset.from_list(chunk, features=family.features(first_shape)))
    dataset = parts[0] if len(parts) == 1 else concatenate_datasets(parts)
    return LoadedData(dataset=dataset, fmt=chosen, n_rows=n_rows, n_bad=n_bad, bad_examples=bad)


def validation_split(dataset: Any, val_set_size: float, seed: int) -> tuple[Any, Any | None]:
    """(train, eval) with `val_set_size` a fraction (< 1) or a row count (>= 1); eval is None at 0."""
    if val_set_size <= 0:
        return dataset, None
    n = len(dataset)
    n_eval = round(n * val_set_size) if val_set_size < 1 else int(val_set_size)
    if n_eval < 1 or n_eval >= n:
        raise BadInput(f"val_set_size {val_set_size} leaves {n_eval} of {n} rows for validation; "
                       "use a fraction below 1 or a count between 1 and the row count minus 1")
    parts = dataset.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return parts["train"], parts["test"]


def last_turn_as_completion(dataset: Any) -> Any:
    """`messages` rows -> conversational `prompt` (every turn before the last assistant reply) + `completion`
    (that reply). For chat templates without `{% generation %}` markers: trl's completion-only loss then
    still trains on the answer alone, with any template. Turns after the last reply are dropped."""
    def split(row: dict[str, Any]) -> dict[str, Any]:
        turns = row["messages"]
        last = max(i for i, t in enumerate(turns) if t["role"] == "assistant")
        return {"prompt": turns[:last], "completion": [turns[last]]}

    return dataset.map(split, remove_columns=["messages"], features=_features("alpaca"))
