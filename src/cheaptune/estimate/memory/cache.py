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
def code_digest() -> str:
    """Digest of the simulator's own code and data (estimate/memory/*.py, estimate/policy.py, estimate/data/*, the
    trainer profiles among them): an upgraded or edited cheaptune re-simulates, where a key of the inputs and the
    library versions alone would keep serving the estimates of the code that wrote them."""
    from pathlib import Path

    root = Path(__file__).parents[1]  # cheaptune/estimate
    files = [*sorted((root / "memory").glob("*.py")), root / "policy.py", *sorted((root / "data").iterdir())]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def key(inputs: dict, config: dict) -> str:
    from cheaptune.estimate.memory import overheads

    return jsoncache.digest({"schema": SCHEMA, "inputs": inputs, "config": config, "libs": _versions(),
                             "overheads": overheads.constants(), "code": code_digest()})


def load(k: str) -> dict | None:
    return jsoncache.load("estimate", k)


def store(k: str, value: dict) -> None:
    """Keep `value` under `k`, unless it is a fallback after a failed simulation: a later run simulates again."""
    if value.get("details", {}).get(SIMULATION_FAILED):
        return
    jsoncache.store("estimate", k, value)
