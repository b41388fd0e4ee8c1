"""Where cheaptune keeps its state: $CHEAPTUNE_HOME or ~/.cheaptune."""

from __future__ import annotations

import os
from pathlib import Path

from cheaptune.errors import BadInput


def home() -> Path:
    """The state folder (registry, estimate cache, converted demo model), created on first use."""
    root = Path(os.environ.get("CHEAPTUNE_HOME") or Path.home() / ".cheaptune").expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file of that name, a read-only disk, a name too long
        why = "a file is in the way" if isinstance(err, (FileExistsError, NotADirectoryError)) else err.strerror
        raise BadInput(f"cannot use {root} as cheaptune's state folder ({why}); "
                       "set CHEAPTUNE_HOME to a folder you can write") from None
    return root


def cache_dir(name: str) -> Path:
    d = home() / "cache" / name
    d.mkdir(parents=True, exist_ok=True)
    return d
