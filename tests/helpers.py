"""Helpers several test folders share (kept out of the product: nothing in cheaptune calls them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def differences(mine: BaseModel, theirs: BaseModel) -> dict[str, tuple[Any, Any]]:
    """{field: (mine, theirs)} for every field of two settings objects that differs: what a plan-to-run
    agreement test prints when the trainer did not run the plan's settings."""
    a, b = mine.model_dump(), theirs.model_dump()
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}
