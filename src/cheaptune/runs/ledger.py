"""Spend beside the checkpoints: what each segment of a run billed, where the next segment finds it.

The registry lives on the machine that ran a segment. A managed job relaunched after a preemption, or moved
to a larger GPU after running out of memory, starts on a fresh machine with an empty registry but the same
checkpoint bucket; without this file its budget cap would start again from $0. Each segment writes its own
entry (keyed by run id and segment), so two records of one segment never add up twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cheaptune.util import atomic

FILE = "cheaptune_spend.json"


@dataclass(frozen=True)
class Prior:
    """What the other segments billed, and the last measured step and checkpoint times (None if unknown)."""

    usd: float = 0.0
    elapsed_s: float = 0.0
    step_s: float | None = None
    save_s: float | None = None


def _read(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def prior(path: str | Path, key: str) -> Prior:
    """The sum over every entry but `key` (this segment's), with the latest entry's step and save times."""
    others = [e for k, e in _read(Path(path)).items() if k != key and isinstance(e, dict)]
    latest = max(others, key=lambda e: e.get("at", 0.0), default={})
    return Prior(sum(float(e.get("usd", 0.0)) for e in others), sum(float(e.get("elapsed_s", 0.0)) for e in others),
                 latest.get("step_s"), latest.get("save_s"))


def record(path: str | Path, key: str, *, usd: float, elapsed_s: float, step_s: float | None,
           save_s: float | None, at: float) -> None:
    """Set this segment's entry (atomically: a reader sees the old file or the new one)."""
    entries = _read(Path(path))
    entries[key] = {"usd": usd, "elapsed_s": elapsed_s, "step_s": step_s, "save_s": save_s, "at": at}
    atomic.write_text(path, json.dumps(entries, sort_keys=True))
