"""A plan's region in SkyPilot's spelling, checked before launch.

SkyPilot refuses a region its catalog does not list (`sky.catalog.common.validate_region_zone_impl`), and
our price rows spell some differently (a Vast location "Texas US" is "Texas, US, NA" there). The check reads
SkyPilot's catalog where it is on disk (its own cache, or a folder the caller names), else the price
catalog's regions and the cloud's spelling pattern (data/skypilot_names.yaml). A marketplace location that
is not listed becomes any location of that cloud: listings come and go, the GPU and price cap still hold.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.launch.names import is_marketplace, region_pattern
from cheaptune.util.names import did_you_mean

ANY = ("", "any", "*")


@dataclass(frozen=True)
class Region:
    """What goes after `cloud/` in the task's infra (None: any region) and, when it changed, why."""

    sky: str | None
    note: str | None = None


def skypilot_catalog_dir() -> Path | None:
    """SkyPilot's own catalog cache (~/.sky/catalogs/<schema>), where it downloaded one; None otherwise."""
    try:
        from sky.catalog import common
    except ImportError:
        return None
    path = Path(common.get_catalog_path(""))
    return path if path.is_dir() else None


@lru_cache(maxsize=32)
def catalog_regions(cloud: str, root: Path | None) -> tuple[str, ...] | None:
    """The Region column of SkyPilot's catalog files for `cloud` under `root`; None when it has none."""
    folder = root / cloud if root is not None else None
    files = sorted(folder.glob("*.csv")) if folder is not None and folder.is_dir() else []
    regions: dict[str, None] = {}
    for f in files:
        with f.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if (row.get("Region") or "").strip():
                    regions.setdefault(row["Region"].strip())
    return tuple(regions) or None


def _words(region: str) -> list[str]:
    return [w for w in re.split(r"[\s,_]+", region.lower()) if w]


def _match(region: str, listed: tuple[str, ...]) -> str | None:
    """Exact (any case), else the listed region whose words start with ours ("Texas US" -> "Texas, US, NA")."""
    low = region.lower()
    exact = next((r for r in listed if r.lower() == low), None)
    if exact is not None:
        return exact
    ours = _words(region)
    return next((r for r in listed if ours and _words(r)[:len(ours)] == ours), None)


def _priced_regions(provider: str) -> set[str]:
    from cheaptune.catalog.sources import load_offers

    return {o.region for o in load_offers() if o.provider == provider and o.region.lower() not in ANY}


def sky_region(provider: str, cloud: str, region: str, root: Path | None) -> Region:
    """The region for `cloud/...`, or BadInput naming the regions it knows and how to fix it."""
    region = region.strip()
    if region.lower() in ANY:
        return Region(None)
    marketplace = is_marketplace(cloud)
    listed = catalog_regions(cloud, root)
    if listed is not None:
        hit = _match(region, listed)
        if hit is not None:
            return Region(hit, None if hit == region else f"region {region!r} is {hit!r} in SkyPilot's {cloud} catalog")
        if marketplace:
            return Region(None, f"{cloud} location {region!r} is not listed in SkyPilot's catalog now: any location")
        raise BadInput(f"region {region!r} is not in SkyPilot's {cloud} catalog{did_you_mean(region, listed)}; "
                       "pass --region with one it lists, or --region any")
    pattern = region_pattern(cloud)
    if pattern is None or re.match(pattern, region):
        return Region(region)
    if marketplace and region in _priced_regions(provider):
        return Region(None, f"{cloud} location {region!r} is not spelled as SkyPilot's catalog spells it "
                            "(and its catalog is not on this machine): any location")
    known = sorted(_priced_regions(provider))
    raise BadInput(f"region {region!r} is not a region of {cloud}{did_you_mean(region, known)} (SkyPilot spells "
                   f"them as {pattern!r}); pass --region with one `cheaptune prices --provider {provider}` "
                   "lists, or --region any")
