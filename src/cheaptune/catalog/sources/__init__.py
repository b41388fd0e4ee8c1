"""Price sources: one module per source, each exposing `SOURCE`, an object meeting `PriceSource`.

Sources are discovered (no hand-kept list) and applied in `priority` order; `mode` says how a
source's offers combine with what came before it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Literal, Protocol

from cheaptune.catalog.prices import Offer

# replace_providers: a source's providers replace earlier rows unless those are newer (dates per provider)
Mode = Literal["base", "replace_providers", "override_rows"]


class PriceSource(Protocol):
    name: str
    priority: int  # lower first; later sources win
    mode: Mode

    def load(self) -> list[Offer]:
        """The source's offers ([] when the source is absent)."""
        ...

    def describe(self) -> dict | None:
        """{'name', 'where', 'date', 'rows', ...} when active, None when absent."""
        ...


def all_sources() -> list[PriceSource]:
    """Every module of this package that defines SOURCE, in priority order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "SOURCE"):
            found.append(module.SOURCE)
    return sorted(found, key=lambda s: s.priority)


def merge(current: list[Offer], new: list[Offer], mode: Mode) -> list[Offer]:
    """Combine a source's offers with those before it (see Mode)."""
    if mode == "base":
        return list(new)
    if mode == "replace_providers":  # the newest source per provider wins (a tie goes to the later source)
        def newest(offers: list[Offer]) -> dict[str, str]:
            out: dict[str, str] = {}
            for o in offers:
                out[o.provider] = max(out.get(o.provider, ""), o.sort_date)
            return out

        before, after = newest(current), newest(new)
        replaced = {p for p, d in after.items() if d >= before.get(p, "")}
        return [o for o in current if o.provider not in replaced] + [o for o in new if o.provider in replaced]
    by_key = {o.key: o for o in current}
    by_key.update({o.key: o for o in new})
    return list(by_key.values())


def load_offers(only: tuple[str, ...] | None = None) -> list[Offer]:
    """Bundled snapshot, then SkyPilot catalogs and the live cache (newest per provider), then the user
    CSV (override rows); `only` names the sources to use (all by default)."""
    offers: list[Offer] = []
    for source in (s for s in all_sources() if only is None or s.name in only):
        offers = merge(offers, source.load(), source.mode)
    return offers


def active_sources() -> list[dict]:
    """One entry per source in use (name, where, date, rows, dropped), for the line under a table."""
    return [info for s in all_sources() if (info := s.describe()) is not None]
