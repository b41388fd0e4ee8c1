"""Scores of generated answers against references: pure functions, no model.

What is scored depends on the references: label-like completions (few distinct short answers, a
classification set) get accuracy and a confusion table; JSON completions get parse validity and validity
against a schema inferred from the references (jsonschema); every set gets exact match.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

MAX_LABELS = 20
MAX_LABEL_WORDS = 4
OTHER = "(other)"
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
               type(None): "null"}


def norm(text: str) -> str:
    return text.strip()


def label_norm(text: str) -> str:
    return text.strip().strip(".!").strip().lower()


def exact_match(preds: list[str], refs: list[str]) -> float:
    return sum(norm(p) == norm(r) for p, r in zip(preds, refs, strict=True)) / max(len(refs), 1)


def is_label_set(refs: list[str]) -> bool:
    """Few distinct short answers, each seen more than once on average: a classification set."""
    labels = {label_norm(r) for r in refs}
    return (1 < len(labels) <= MAX_LABELS and len(labels) * 2 <= len(refs)
            and all(0 < len(r.split()) <= MAX_LABEL_WORDS for r in labels))


def label_scores(preds: list[str], refs: list[str]) -> dict[str, Any]:
    """Accuracy and confusion[reference][prediction] (predictions outside the label set count as OTHER)."""
    labels = sorted({label_norm(r) for r in refs})
    confusion: dict[str, Counter] = {lab: Counter() for lab in labels}
    for p, r in zip(preds, refs, strict=True):
        got = label_norm(p)
        confusion[label_norm(r)][got if got in confusion else OTHER] += 1
    hits = sum(confusion[lab][lab] for lab in labels)
    return {"accuracy": hits / max(len(refs), 1), "labels": labels,
            "confusion": {r: dict(c) for r, c in confusion.items()}}


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def is_json_set(refs: list[str]) -> bool:
    return bool(refs) and all(isinstance(_parse(r), (dict, list)) for r in refs)


def infer_schema(refs: list[str]) -> dict[str, Any]:
    """A JSON schema the references share: an object with the keys all of them have, typed as in the first."""
    objs = [_parse(r) for r in refs]
    if not all(isinstance(o, dict) for o in objs):
        return {"type": "array"} if all(isinstance(o, list) for o in objs) else {}
    required = sorted(set.intersection(*(set(o) for o in objs)))
    types = {k: sorted({_JSON_TYPES[type(o[k])] for o in objs}) for k in required}
    # an integer where a number is also seen is a number
    props = {k: {"type": "number" if set(t) == {"integer", "number"} else (t[0] if len(t) == 1 else t)}
             for k, t in types.items()}
    return {"type": "object", "required": required, "properties": props}


def json_scores(preds: list[str], refs: list[str]) -> dict[str, Any]:
    """Share of answers that parse as JSON, and that validate against the references' schema."""
    from jsonschema import Draft202012Validator

    schema = infer_schema(refs)
    validator = Draft202012Validator(schema)
    parsed = [_parse(p) for p in preds]
    valid = [p is not None for p in parsed]
    fits = [v and validator.is_valid(p) for v, p in zip(valid, parsed, strict=True)]
    n = max(len(preds), 1)
    return {"json_valid": sum(valid) / n, "schema_valid": sum(fits) / n, "schema": schema}


def score_answers(preds: list[str], refs: list[str]) -> dict[str, Any]:
    """Exact match, plus label or JSON scores when the references call for them."""
    out: dict[str, Any] = {"exact_match": exact_match(preds, refs)}
    if is_json_set(refs):
        out.update(json_scores(preds, refs))
    elif is_label_set(refs):
        out.update(label_scores(preds, refs))
    return out
