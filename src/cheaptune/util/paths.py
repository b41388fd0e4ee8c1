"""Where cheaptune keeps its state: $CHEAPTUNE_HOME or ~/.cheaptune."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The state folder (registry, estimate cache, converted demo model), created on first use."""
    root = Path(os.environ.get("CHEAPTUNE_HOME", Path.home() / ".cheaptune")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(name: str) -> Path:
    d = home() / "cache" / name
    d.mkdir(parents=True, exist_ok=True)
    return d
