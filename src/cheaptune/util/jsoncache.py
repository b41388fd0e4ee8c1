"""One on-disk JSON cache: a value kept under a hash of what it was computed from, written atomically.

Reading needs only the stdlib, so a warm command never imports torch for a value it computed before. The
estimate cache (estimate.memory.cache), the planner's fits (plan.sources) and the catalog's counts
(catalog.models) share it; each says which values it does not keep (a fallback a transient failure caused).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cheaptune.util import atomic
from cheaptune.util.paths import cache_dir

T = TypeVar("T")


def digest(inputs: Any) -> str:
    """A 32-hex-digit key for JSON-able inputs (keys sorted, anything else by str): equal inputs, equal keys."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:32]


def path(kind: str, key: str) -> Path:
    """Where `key` of cache `kind` lives (the folder is created)."""
    return cache_dir(kind) / f"{key}.json"


def load(kind: str, key: str) -> Any | None:
    """The value kept under `key`; None when there is none or it cannot be read."""
    try:
        return json.loads(path(kind, key).read_text())
    except (OSError, ValueError):
        return None


def store(kind: str, key: str, value: Any) -> None:
    atomic.write_text(path(kind, key), json.dumps(value))


def cached(kind: str, key: str, compute: Callable[[], T], decode: Callable[[Any], T] = lambda v: v,
           encode: Callable[[T], Any] = lambda v: v, keep: Callable[[T], bool] = lambda _v: True) -> T:
    """decode(the kept value), or compute() and keep encode(it) when keep(it); a kept value that does not
    decode (a file from an older layout) is computed again."""
    try:
        return decode(json.loads(path(kind, key).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = compute()
    if keep(value):
        store(kind, key, encode(value))
    return value
