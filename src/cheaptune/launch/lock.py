"""The versions the rented machine installs: the tested lock, not whatever the index has newest.

The wheel declares open ranges (`transformers>=5.0`), so a plain `pip install` on the machine resolves
the newest releases, a stack nobody tested. The task hands pip the project's lock (requirements/lock.txt)
as constraints: every package it names is pinned there, and what it does not name (CUDA libraries of the
GPU torch wheel, a speed option's extra) still resolves. Run from an installed wheel, with no checkout to
read the lock from, the constraints are the versions installed here, the environment that planned the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from cheaptune.launch.package import DIST, _origin

LOCK = ("requirements", "lock.txt")


@dataclass(frozen=True)
class Constraints:
    text: str
    source: str  # where the pins came from, said in the dry run


def constraints() -> Constraints:
    """The project's lock from a source checkout; else this environment's versions (local tags dropped:
    `torch==2.13.0+cpu` pins 2.13.0, whose default Linux wheel is the CUDA build)."""
    kind, path = _origin()
    if kind == "source" and path is not None and path.joinpath(*LOCK).is_file():
        lock = path.joinpath(*LOCK)
        return Constraints(lock.read_text(encoding="utf-8"), str(lock))
    pins = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name != DIST:
            pins[name] = f"{name}=={dist.version.split('+')[0]}"
    return Constraints("\n".join(sorted(pins.values())) + "\n", "the versions installed here (no lock file found)")
