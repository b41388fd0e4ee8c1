"""The conditions a bench result was measured under: date, machine (cores, load average), versions.

Every script that writes bench/results/*.json stamps its document with `stamp(doc)`, so a figure can be
compared only with figures taken under comparable conditions (a loaded 2-core box runs several times slower).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = ("cheaptune", "torch", "transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes")


# What the benches' --write-data writes into src/: a fit that stamps its commit after writing the first of these
# would otherwise call its own tree uncommitted.
BENCH_WRITTEN = tuple(f"src/cheaptune/estimate/data/{name}" for name in (
    "steptime.yaml", "mfu_ceilings.yaml", "time_residuals.json", "interconnect.yaml", "grpo.yaml"))


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def commit(root: Path = Path(__file__).parents[1]) -> str:
    """The commit the bench ran on, with '+ uncommitted changes' when src/ or bench/ (results aside) differ from it
    (the figures are the working tree's), or 'unknown' outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "src", "bench", ":(exclude)bench/results",
                    *(f":(exclude){p}" for p in BENCH_WRITTEN))
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha} + uncommitted changes" if dirty else sha


def record() -> dict:
    """Date, commit, machine and installed versions of the packages behind the figures (None: not installed)."""
    return {"date": dt.date.today().isoformat(), "commit": commit(),
            "machine": {"cpu_cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
                        "platform": platform.platform(), "python": platform.python_version()},
            "versions": {name: _version(name) for name in PACKAGES}}


def stamp(doc: dict) -> dict:
    """`doc` with the run record under "run" (taken now, as the results are written)."""
    return {**doc, "run": record()}
