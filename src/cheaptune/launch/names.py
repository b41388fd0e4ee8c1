"""Our provider and GPU names -> SkyPilot's spelling (data/skypilot_names.yaml).

SkyPilot rejects a resource whose cloud or accelerator name its catalog does not know, and each cloud
spells a few boards its own way (Lambda's "A6000", Cudo's "H100-SXM"); the table keeps that out of code.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean

NAMES_FILE = Path(__file__).parent / "data" / "skypilot_names.yaml"


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load(NAMES_FILE.read_text())


def sky_cloud(provider: str) -> str | None:
    """SkyPilot's cloud name for a provider, or None when SkyPilot cannot launch there."""
    return _table()["clouds"].get(provider.strip().lower())


def require_cloud(provider: str) -> str:
    cloud = sky_cloud(provider)
    if cloud is None:
        known = sorted(all_clouds())
        raise BadInput(
            f"provider {provider!r} is not a cloud SkyPilot can launch on{did_you_mean(provider, known)}; "
            f"re-plan with --provider one of {', '.join(known)}"
        )
    return cloud


def sky_gpu(gpu: str, cloud: str) -> str:
    """SkyPilot's accelerator name for our canonical GPU on one cloud."""
    from cheaptune.catalog.gpus import resolve_gpu

    canonical = resolve_gpu(gpu).name
    gpus = _table()["gpus"]
    per_cloud = gpus.get(cloud, {})
    if canonical in per_cloud:
        return per_cloud[canonical]
    return gpus["default"].get(canonical, canonical)


def all_clouds() -> set[str]:
    """Every SkyPilot cloud a provider maps to: what `require_cloud` offers when a provider has none."""
    return set(_table()["clouds"].values())


def region_pattern(cloud: str) -> str | None:
    """How SkyPilot's catalog spells the cloud's regions (a regex), for when its catalog is not on disk."""
    return _table().get("regions", {}).get(cloud)


def is_marketplace(cloud: str) -> bool:
    """A cloud whose regions are hosts' listed locations, which come and go."""
    return cloud in _table().get("marketplaces", [])
