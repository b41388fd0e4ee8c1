"""Printing helpers shared by commands: JSON to stdout, tables through rich."""

from __future__ import annotations

import json
from typing import Any


def emit_json(obj: Any) -> None:
    """One JSON document on stdout (dataclasses and pydantic models are converted first)."""
    print(json.dumps(to_jsonable(obj), indent=2, sort_keys=False, default=str))


def to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def console():
    """A rich Console (imported lazily: rich costs ~50 ms)."""
    from rich.console import Console

    return Console()
