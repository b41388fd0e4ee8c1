"""The conditions a bench result was measured under: date, machine (cores, load average), versions.

Every script that writes bench/results/*.json stamps its document with `stamp(doc)`, so a figure can be
compared only with figures taken under comparable conditions (a loaded 2-core box runs several times slower).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform

PACKAGES = ("cheaptune", "torch", "transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes")


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def record() -> dict:
    """Date, machine and installed versions of the packages behind the figures (None: not installed)."""
    return {"date": dt.date.today().isoformat(),
            "machine": {"cpu_cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
                        "platform": platform.platform(), "python": platform.python_version()},
            "versions": {name: _version(name) for name in PACKAGES}}


def stamp(doc: dict) -> dict:
    """`doc` with the run record under "run" (taken now, as the results are written)."""
    return {**doc, "run": record()}
