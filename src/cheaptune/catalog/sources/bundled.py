"""The snapshot shipped with cheaptune (catalog/data/prices.csv): the offline default."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from cheaptune.catalog import DATA_DIR
from cheaptune.catalog.prices import Offer, date_span, read_price_csv

PRICES_FILE = DATA_DIR / "prices.csv"


@lru_cache(maxsize=4)
def _read(path: Path, mtime_ns: int) -> tuple[Offer, ...]:
    return tuple(read_price_csv(path))


def bundled_offers(path: Path = PRICES_FILE) -> list[Offer]:
    """The snapshot's offers (cached until the file changes)."""
    return list(_read(path, os.stat(path).st_mtime_ns))


class BundledSource:
    name = "bundled"
    priority = 0
    mode = "base"

    def __init__(self, path: Path = PRICES_FILE):
        self.path = path

    def load(self) -> list[Offer]:
        return bundled_offers(self.path)

    def describe(self) -> dict:
        offers = self.load()
        return {
            "name": self.name,
            "where": str(self.path),
            "date": date_span(offers),
            "rows": len(offers),
        }


SOURCE = BundledSource()
