"""How old the prices behind a plan are: a note per provider shown and a warning past STALE_DAYS.

Pure over its arguments (today is passed in), so the CLI and the tests share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from cheaptune.plan.doctor import Finding

STALE_DAYS = 7
CHOICES = ("bundled", "cache", "live")  # plan --prices
REFRESH = "`cheaptune prices refresh` (or plan --prices live)"


def _age(day: str, today: date) -> int:
    return (today - date.fromisoformat(day)).days


def price_age(options: Iterable[Any], today: date, has_cache: bool, choice: str = "cache") -> tuple[list[str], list[Finding]]:
    """(notes, warnings) for the offers behind `options`: the newest date per provider and its age."""
    newest: dict[str, str] = {}
    for o in options:
        day = getattr(o.offer, "date", None) if getattr(o, "offer", None) is not None else None
        if day:
            newest[o.provider] = max(newest.get(o.provider, ""), day)
    if not newest:
        return [], []
    ages = {p: _age(d, today) for p, d in sorted(newest.items())}
    notes = ["price ages: " + ", ".join(f"{p} {a} d (dated {newest[p]})" for p, a in ages.items())]
    if choice == "bundled":
        notes.append("prices: the bundled snapshot only (--prices bundled)")
    elif not has_cache:
        notes.append(f"prices: the bundled snapshot (and SkyPilot's catalogs where present); no live cache yet: {REFRESH}")
    stale = [p for p, a in ages.items() if a > STALE_DAYS]
    warnings = []
    if stale:
        oldest = max(ages[p] for p in stale)
        warnings.append(Finding("stale-prices", f"prices of {', '.join(stale)} are up to {oldest} days old "
                                f"(more than {STALE_DAYS}); refresh them: {REFRESH}"))
    return notes, warnings
