"""Reading a user's YAML mapping (a training config, a plan file) with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput
from cheaptune.util.files import read_text


def read_mapping(path: str | Path, what: str, fix: str) -> dict[str, Any]:
    """The YAML file at `path` as a dict (empty file: {}); `what` names it, `fix` says how to get a good one."""
    p = Path(path)
    text = read_text(p, what, fix, allow_empty=True)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise BadInput(f"{what} {p}{line} is not valid YAML; fix the syntax there") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInput(f"{what} {p} must be a YAML mapping of keys to values; {fix}")
    return raw
