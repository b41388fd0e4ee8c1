"""A user's own prices ($CHEAPTUNE_PRICES or <home>/prices.csv), same columns as the snapshot.

A row with the same (provider, kind, gpu, gpu_count, region, instance_type) replaces the earlier
one; any other row is added. Users negotiate prices and clouds change them; this is where they say so.
"""

from __future__ import annotations

import os
from pathlib import Path

from cheaptune.catalog.prices import Offer, date_span, read_price_csv
from cheaptune.errors import BadInput
from cheaptune.util.paths import home

ENV = "CHEAPTUNE_PRICES"


def user_prices_path() -> Path:
    """The user's price file; one named by $CHEAPTUNE_PRICES must exist (a typo should not pass silently)."""
    raw = os.environ.get(ENV)
    if not raw:
        return home() / "prices.csv"
    path = Path(raw).expanduser()
    if not path.is_file():
        raise BadInput(f"${ENV} points to {path}, which is not a file; fix the path or unset it")
    return path


class UserCsvSource:
    name = "user-csv"
    priority = 20
    mode = "override_rows"

    def load(self) -> list[Offer]:
        path = user_prices_path()
        return read_price_csv(path) if path.is_file() else []

    def describe(self) -> dict | None:
        path = user_prices_path()
        if not path.is_file():
            return None
        offers = self.load()
        return {
            "name": self.name,
            "where": str(path),
            "date": date_span(offers),
            "rows": len(offers),
        }


SOURCE = UserCsvSource()
