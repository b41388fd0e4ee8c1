"""The live-price cache that `cheaptune prices refresh` writes (<home>/prices-live): offers.csv + meta.json.

offers.csv has the snapshot's columns (each row dated the day it was fetched), listings.json the facts of
marketplace listings (reliability, verification, bandwidth, disk); meta.json says when each
provider was fetched, what was dropped and which providers failed. The folder is replaced in one
rename, so a reader sees the old cache or the new one. A provider that failed keeps its previous rows.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from cheaptune.catalog.prices import COLUMNS, Offer, date_span, read_price_csv
from cheaptune.errors import BadInput
from cheaptune.util.paths import home

FOLDER = "prices-live"


def cache_dir() -> Path:
    return home() / FOLDER


def read_meta(folder: Path | None = None) -> dict[str, Any] | None:
    path = (folder or cache_dir()) / "meta.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BadInput(f"{path}: unreadable price cache ({err}); run `cheaptune prices refresh` again") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("providers"), dict):
        raise BadInput(f"{path}: not a cheaptune price cache; delete it and run `cheaptune prices refresh`")
    return meta


def read_offers(folder: Path | None = None) -> list[Offer]:
    """The cached offers, marketplace rows with their listing's facts (listings.json)."""
    folder = folder or cache_dir()
    path = folder / "offers.csv"
    if not path.is_file():
        return []
    offers = read_price_csv(path)
    listings_file = folder / "listings.json"
    if not listings_file.is_file():
        return offers
    try:
        listings = json.loads(listings_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BadInput(f"{listings_file}: unreadable ({err}); run `cheaptune prices refresh` again") from None
    return [replace(o, listing=listings.get(f"{o.provider}/{o.instance_type}")) for o in offers]


def write_cache(results: dict[str, Any], fetched_at: str, folder: Path | None = None) -> dict[str, Any]:
    """Merge a fetch with the previous cache (failed providers keep their rows) and swap it in atomically.

    `results` is {provider: live.ProviderResult}. Returns the new meta. Nothing is written when every
    provider failed."""
    from cheaptune.util.atomic import atomic_dir

    target = folder or cache_dir()
    fresh = {p: r for p, r in results.items() if r.error is None}
    if not fresh:
        raise BadInput("no provider could be fetched, the previous price cache is kept: "
                       + "; ".join(f"{p}: {r.error}" for p, r in sorted(results.items())))
    old_meta = read_meta(target) or {"providers": {}}
    kept = [o for o in read_offers(target) if o.provider not in fresh]
    offers = kept + [o for r in fresh.values() for o in r.offers]
    providers = {p: v for p, v in old_meta["providers"].items() if p not in fresh}
    for p, r in results.items():
        if r.error is None:
            providers[p] = {"fetched_at": fetched_at, "rows": len(r.offers), "dropped": dict(r.dropped), "error": None}
        else:
            providers[p] = {**providers.get(p, {"fetched_at": None, "rows": 0, "dropped": {}}), "error": r.error}
    meta = {"fetched_at": fetched_at, "providers": providers}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for o in sorted(offers, key=lambda o: (o.provider, o.gpu, o.price_per_hour)):
        writer.writerow(asdict(o))
    with atomic_dir(target) as tmp:
        (tmp / "offers.csv").write_text(buf.getvalue(), encoding="utf-8")
        listings = {f"{o.provider}/{o.instance_type}": o.listing for o in offers if o.listing}
        (tmp / "listings.json").write_text(json.dumps(listings, sort_keys=True), encoding="utf-8")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    return meta


class LiveCacheSource:
    name = "live-cache"
    priority = 5  # after the snapshot; SkyPilot's catalogs and the cache each replace older providers
    mode = "replace_providers"

    def load(self) -> list[Offer]:
        return read_offers()

    def describe(self) -> dict | None:
        meta = read_meta()
        if meta is None:
            return None
        offers = self.load()
        dropped: dict[str, int] = {}
        for info in meta["providers"].values():
            for why, n in (info.get("dropped") or {}).items():
                dropped[why] = dropped.get(why, 0) + n
        failed = {p: i["error"] for p, i in meta["providers"].items() if i.get("error")}
        return {"name": self.name, "where": str(cache_dir()), "date": date_span(offers),
                "rows": len(offers), "dropped": dropped, "failed": failed}


SOURCE = LiveCacheSource()
