"""Spot interruption rates: one stated method for every provider (data/interruption.yaml).

A published band of interrupted instances over a period becomes hourly rates by -ln(1 - p) / hours;
the band's edges are the low/high range and the planner prices with their midpoint. A rate written on
a price row (a user's own measurement) overrides the table; a single figure has no range, so its high
end is PESSIMISTIC_RATE_FACTOR times it (the spot estimator's rule without a stated range).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from cheaptune.catalog import DATA_DIR, ReadDate, SourceDate, SourceRef, file_version, load_rows
from cheaptune.errors import BadInput
from cheaptune.estimate.cost.spot import PESSIMISTIC_RATE_FACTOR

RATES_FILE = DATA_DIR / "interruption.yaml"


class RateRow(BaseModel):
    provider: str
    family: str = ""
    band: tuple[float, float] | None = Field(None, description="share interrupted over period_hours, low/high")
    period_hours: float | None = Field(None, gt=0)
    per_hour: tuple[float, float] | None = Field(None, description="rates per hour, low/high")
    assumed: bool = False
    source: SourceRef
    source_date: SourceDate
    read: ReadDate

    @model_validator(mode="after")
    def _one_form(self) -> RateRow:
        if (self.band is None) == (self.per_hour is None):
            raise ValueError("give either band (with period_hours) or per_hour")
        if self.band is not None and (self.period_hours is None or not 0 <= self.band[0] <= self.band[1] < 1):
            raise ValueError("band needs period_hours and 0 <= low <= high < 1")
        if self.per_hour is not None and not 0 <= self.per_hour[0] <= self.per_hour[1]:
            raise ValueError("per_hour needs 0 <= low <= high")
        return self


@dataclass(frozen=True)
class Rate:
    """Interruptions per hour of a running instance: the range and the value priced."""

    low: float
    expected: float
    high: float
    source: str
    assumed: bool = False
    source_date: str = ""  # the date the rate's source gives (or "undated"); empty for a row's own rate

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "expected": self.expected, "high": self.high, "source": self.source,
                "source_date": self.source_date, "assumed": self.assumed}


def _hourly(share: float, hours: float) -> float:
    return -math.log1p(-share) / hours


def _rate(row: RateRow) -> Rate:
    if row.per_hour is not None:
        low, high = row.per_hour
    else:
        low, high = (_hourly(p, row.period_hours or 1.0) for p in row.band or (0.0, 0.0))
    return Rate(low, (low + high) / 2, high, f"{row.source} (source dated {row.source_date}, read {row.read})",
                row.assumed, row.source_date)


@functools.lru_cache(maxsize=4)
def _table(path: Path, version: tuple[int, int]) -> tuple[tuple[RateRow, Rate], ...]:
    rows = load_rows(path, "rates", RateRow, "provider")
    if not any(r.provider == "*" for r in rows):
        raise BadInput(f"{path}: needs a catch-all entry with provider '*'; restore it from the package")
    return tuple((r, _rate(r)) for r in rows)


def rate_for(offer: Any, path: Path = RATES_FILE) -> Rate:
    """The interruption rate range of a spot offer (provider, instance family), or the row's own rate."""
    own = getattr(offer, "interruption_per_hour", None)
    if own is not None:
        value = float(own)
        return Rate(value, value, value * PESSIMISTIC_RATE_FACTOR,
                    f"the price row's own rate ({getattr(offer, 'source', 'user')})")
    provider, instance = offer.provider.lower(), str(offer.instance_type or "")
    for row, rate in _table(Path(path), file_version(path)):
        if row.provider in (provider, "*") and instance.startswith(row.family):
            return rate
    raise AssertionError("unreachable: the table has a catch-all row")  # checked in _table


# A marketplace listing's reliability score r (Vast.ai's share of the host's past rentals that ran without
# fault: https://vast.ai/faq, "reliability") is read as the chance the machine stays up through a window,
# one week at the low end and one day at the high end: Vast does not say over what window it is measured.
HOST_WINDOW_HOURS = (24.0 * 7, 24.0)


def host_rate(offer: Any) -> Rate | None:
    """Host failures per hour of a marketplace listing from its reliability score; None without one."""
    r = (getattr(offer, "listing", None) or {}).get("reliability")
    if r is None or not 0 < r <= 1:
        return None
    low, high = (-math.log(r) / hours for hours in HOST_WINDOW_HOURS)
    return Rate(low, (low + high) / 2, high, f"listing reliability {r:.3f}, read as surviving a week (low) to a "
                f"day (high); assumed, the score's window is not published", assumed=True)


def priced_rate(offer: Any) -> Rate | None:
    """The rate a plan prices an offer's interruptions with: a spot offer's (rate_for), else a marketplace
    host's failures (host_rate); None for an on-demand offer without a reliability score."""
    return rate_for(offer) if offer.spot else host_rate(offer)
