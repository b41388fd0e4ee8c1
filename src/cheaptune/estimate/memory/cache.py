"""On-disk cache of estimates keyed by a hash of the inputs, the model config and library versions.

Reading it needs only the stdlib, so a warm `estimate_memory` never imports torch.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import metadata

from cheaptune.util import jsoncache

LIBS = ("torch", "transformers", "peft", "bitsandbytes")
SCHEMA = 1
# details key of an analytic fallback taken because the simulation raised (compute.py): such an estimate is not
# stored, since the failure may be transient (code edited mid-run, an interrupted import) and would otherwise stick
SIMULATION_FAILED = "simulation_failed"


def _versions() -> dict[str, str]:
    out = {}
    for lib in LIBS:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "absent"
    return out


@cache
def _profiles() -> str:
    """The trainer profiles' file digest: editing a profile re-simulates what it changes."""
    from cheaptune.estimate.memory.profiles import DATA

    return hashlib.sha256(DATA.read_bytes()).hexdigest()[:16]


def key(inputs: dict, config: dict) -> str:
    from cheaptune.estimate.memory import overheads

    return jsoncache.digest({"schema": SCHEMA, "inputs": inputs, "config": config, "libs": _versions(),
                             "overheads": overheads.constants(), "profiles": _profiles()})


def load(k: str) -> dict | None:
    return jsoncache.load("estimate", k)


def store(k: str, value: dict) -> None:
    """Keep `value` under `k`, unless it is a fallback after a failed simulation: a later run simulates again."""
    if value.get("details", {}).get(SIMULATION_FAILED):
        return
    jsoncache.store("estimate", k, value)
