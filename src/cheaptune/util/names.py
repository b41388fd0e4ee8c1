"""Did-you-mean suggestions for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def suggest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Closest matches to `name` among `choices`, case-insensitive, best first."""
    by_lower: dict[str, str] = {}
    for c in choices:
        by_lower.setdefault(c.lower(), c)
    low = name.lower()
    hits = difflib.get_close_matches(low, list(by_lower), n=n, cutoff=0.5)
    if not hits:
        hits = [k for k in by_lower if low in k or k in low][:n]
    return [by_lower[h] for h in hits]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X, Y?)' suffix, or '' when nothing is close."""
    hits = suggest(name, choices)
    return f" (did you mean {', '.join(hits)}?)" if hits else ""
