"""SkyPilot catalogs (`catalogs/<version>/<cloud>/vms.csv`): they replace the bundled rows of their clouds.

Where: $CHEAPTUNE_SKY_CATALOGS, else a copy made by `cheaptune prices import-skypilot`
(<home>/skypilot-catalogs), else SkyPilot's own cache ~/.sky/catalogs. Per cloud the newest schema
version wins. The catalogs carry prices only: billing rules, storage, egress and spot facts come from
the bundled snapshot's rows for the same provider (see `provider_defaults`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections import Counter
from pathlib import Path

from cheaptune.catalog import file_version
from cheaptune.catalog.prices import Offer, date_span
from cheaptune.catalog.sources.bundled import bundled_offers
from cheaptune.catalog.sources.skypilot_parse import ImportResult, parse_vms_csv
from cheaptune.errors import BadInput
from cheaptune.util.paths import home

ENV = "CHEAPTUNE_SKY_CATALOGS"
IMPORTED = "skypilot-catalogs"
# For a cloud the snapshot does not know: the coarsest billing and dearest storage/egress seen there.
FALLBACK = {"billing_unit_s": 3600, "min_billed_s": 3600, "storage_gb_month": 0.29, "egress_per_gb": 0.12,
            "interruption_per_hour": None, "notice_s": 0}


def catalog_root() -> Path | None:
    """The first catalog folder that exists, in the order the module docstring gives."""
    if os.environ.get(ENV):
        root = Path(os.environ[ENV]).expanduser()
        if not root.is_dir():
            raise BadInput(f"${ENV} points to {root}, which is not a folder; fix or unset it")
        return root
    for root in (home() / IMPORTED, Path.home() / ".sky" / "catalogs"):
        if root.is_dir():
            return root
    return None


def find_catalogs(root: Path) -> dict[str, Path]:
    """{cloud: vms.csv} using the newest schema version (v8 over v7) that has the cloud."""
    base = root / "catalogs" if (root / "catalogs").is_dir() else root
    found: dict[str, tuple[int, Path]] = {}
    for version_dir in base.iterdir() if base.is_dir() else ():
        match = re.fullmatch(r"v(\d+)", version_dir.name)
        if not match or not version_dir.is_dir():
            continue
        for vms in version_dir.glob("*/vms.csv"):
            cloud, version = vms.parent.name, int(match.group(1))
            if cloud not in found or version > found[cloud][0]:
                found[cloud] = (version, vms)
    return {cloud: path for cloud, (_, path) in sorted(found.items())}


def provider_defaults(offers: list[Offer]):
    """A lookup (provider, kind, gpu) -> non-price facts, from the snapshot's rows.

    Same provider and spot-ness; the same GPU when the snapshot has it (AWS spot rates differ by
    family), else the provider's most pessimistic row (highest interruption rate, coarsest billing).
    """
    facts = ("billing_unit_s", "min_billed_s", "storage_gb_month", "egress_per_gb", "interruption_per_hour", "notice_s")

    def pick(provider: str, kind: str, gpu: str) -> dict:
        same = [o for o in offers if o.provider == provider and o.spot == (kind == "spot")]
        if not same:
            return dict(FALLBACK)
        chosen = [o for o in same if o.gpu == gpu] or same
        worst = max(chosen, key=lambda o: (o.interruption_per_hour or 0.0, o.billing_unit_s, o.min_billed_s))
        return {f: getattr(worst, f) for f in facts}

    return pick


def import_catalogs(root: Path) -> dict[str, ImportResult]:
    """Parse every cloud's newest vms.csv under `root`."""
    defaults = provider_defaults(bundled_offers())
    return {cloud: parse_vms_csv(path, cloud, defaults) for cloud, path in find_catalogs(root).items()}


@functools.lru_cache(maxsize=4)
def _imported(root: Path, versions: tuple) -> dict[str, ImportResult]:
    """import_catalogs memoised on the files' (mtime, size): `versions` is the cache key."""
    return import_catalogs(root)


def copy_catalogs(src: Path) -> tuple[Path, dict[str, ImportResult]]:
    """Validate `src` and copy its vms.csv files into <home>/skypilot-catalogs in one atomic swap."""
    from cheaptune.util.atomic import atomic_dir

    if not src.is_dir():
        raise BadInput(f"{src} is not a folder; pass a SkyPilot catalog folder (with v8/<cloud>/vms.csv)")
    catalogs = find_catalogs(src)
    if not catalogs:
        raise BadInput(f"{src}: no <version>/<cloud>/vms.csv found; pass e.g. ~/.sky/catalogs")
    results = import_catalogs(src)
    target = home() / IMPORTED
    with atomic_dir(target) as tmp:
        for cloud, path in catalogs.items():
            dest = tmp / path.parent.parent.name / cloud / "vms.csv"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
    return target, results


class SkyPilotSource:
    name = "skypilot"
    priority = 10
    mode = "replace_providers"

    def _results(self) -> tuple[Path | None, dict[str, ImportResult]]:
        """Parsed once per process while the files stay the same (load and describe both need them)."""
        root = catalog_root()
        if root is None:
            return None, {}
        versions = tuple((str(p), file_version(p)) for p in find_catalogs(root).values())
        return root, _imported(root, versions)

    def load(self) -> list[Offer]:
        return [o for r in self._results()[1].values() for o in r.offers]

    def describe(self) -> dict | None:
        root, results = self._results()
        if not results:
            return None
        dropped: Counter = Counter()
        for r in results.values():
            dropped.update(r.dropped)
        return {
            "name": self.name,
            "where": str(root),
            "date": date_span([o for r in results.values() for o in r.offers]),
            "rows": sum(len(r.offers) for r in results.values()),
            "clouds": sorted(results),
            "dropped": dict(dropped),
        }


SOURCE = SkyPilotSource()
