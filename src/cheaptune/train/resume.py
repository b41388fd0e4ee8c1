"""Which checkpoint to resume from, and which registry record the run continues."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.train import checkpoints as ck
from cheaptune.util import atomic

log = logging.getLogger(__name__)

RUN_FILE = "cheaptune_run.json"


def _warn(msg: str) -> None:
    log.warning(msg)
    print(f"warning: {msg}", flush=True)


def _problem(ckpt: Path) -> str | None:
    """What makes a checkpoint unusable for this run: a bad checksum, or a rank's state missing."""
    from cheaptune.train.distributed import sharded_checkpoint_problem

    return ck.verify(ckpt) or sharded_checkpoint_problem(ckpt, int(os.environ.get("WORLD_SIZE", "1")))


def choose(resume: str, root: Path) -> Path | None:
    """`auto`: the newest checkpoint that verifies and holds every rank's state (others skipped with a
    warning); `never`: none; otherwise the given checkpoint folder, which must pass both checks."""
    if resume == "never":
        return None
    if resume == "auto":
        for ckpt in reversed(ck.list_checkpoints(root)):
            problem = _problem(ckpt)
            if problem is None:
                return ckpt
            _warn(f"skipping {ckpt}: {problem}")
        return None
    path = Path(resume)
    if not path.is_dir():
        raise BadInput(f"resume: {path} is not a folder; use auto, never or a checkpoint-N folder")
    problem = _problem(path)
    if problem is not None:
        raise BadInput(f"resume: checkpoint {path} does not verify ({problem}); use --resume auto to pick a good one")
    return path


def saved_run_id(root: Path) -> str | None:
    """The registry id a previous segment of this run wrote beside its checkpoints."""
    try:
        return json.loads((root / RUN_FILE).read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None


def save_run_id(root: Path, run_id: str) -> None:
    atomic.write_text(root / RUN_FILE, json.dumps({"run_id": run_id}))
