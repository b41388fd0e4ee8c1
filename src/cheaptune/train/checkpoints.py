"""Checkpoint safety: HF's checkpoint-N/ layout, made atomic and verifiable.

A checkpoint is written into a hidden staging folder, gets a manifest of sha256 checksums, is
fsynced, and only then renamed to checkpoint-N. A kill at any moment leaves either the old set of
checkpoints or the new one; resume trusts only folders whose manifest verifies.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.util import atomic

log = logging.getLogger(__name__)

MANIFEST = "cheaptune_manifest.json"
STAGING = ".staging"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, step: int) -> None:
    """Checksum every file (fsyncing each), then write the manifest last, atomically."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[str(p.relative_to(folder))] = {"sha256": sha256(p), "bytes": p.stat().st_size}
    atomic.write_text(folder / MANIFEST, json.dumps({"step": step, "files": files}, indent=1))


def verify(folder: Path) -> str | None:
    """None when every file in the manifest is present with its checksum; else what is wrong."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError):
        return "no readable manifest"
    for rel, meta in files.items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != meta["bytes"] or sha256(p) != meta["sha256"]:
            return f"{rel} does not match its checksum"
    return None


def step_of(folder: Path) -> int | None:
    m = _NAME.match(folder.name)
    return int(m.group(1)) if m else None


def list_checkpoints(root: Path) -> list[Path]:
    """checkpoint-N folders under root, oldest step first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=lambda p: step_of(p) or 0)


def staging_dir(root: Path) -> Path:
    return root / STAGING


def clear_staging(root: Path) -> None:
    """Remove what a killed save left half-written."""
    shutil.rmtree(staging_dir(root), ignore_errors=True)


@contextmanager
def no_space_stops(root: Path, step: int) -> Iterator[None]:
    """A save that runs out of disk drops its half-written staging folder, leaves the published
    checkpoints as they are, and stops the run with one line (rerunning resumes from the last one)."""
    try:
        yield
    except Exception as err:
        if not _no_space(err):
            raise
        clear_staging(root)
        done = list_checkpoints(root)
        kept = f"{done[-1].name} is intact" if done else "no earlier checkpoint exists"
        raise BadInput(f"disk full while saving the checkpoint of step {step} in {root}; {kept}; free space "
                       "(or set --checkpoint-dir on a larger disk) and run the same command to resume") from None


def _no_space(err: BaseException | None) -> bool:
    """Whether an exception (or one it came from) is a full disk; torch reports it as 'file write failed'."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(err) or "file write failed" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def publish(staged: Path, root: Path) -> Path:
    """Manifest the staged checkpoint and rename it into place (one atomic rename)."""
    step = step_of(staged)
    if step is None:
        raise ValueError(f"not a checkpoint folder: {staged}")
    write_manifest(staged, step)
    final = root / staged.name
    # Same step saved twice (e.g. a step save then a preemption save): the new one replaces it.
    atomic.move_dir_into_place(staged, final)
    return final


def eval_loss_at(ckpt: Path) -> float | None:
    """The eval loss logged at this checkpoint's step (from its trainer_state.json), if any."""
    step = step_of(ckpt)
    try:
        state = json.loads((ckpt / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    losses = [e["eval_loss"] for e in state.get("log_history", []) if e.get("step") == step and "eval_loss" in e]
    return losses[-1] if losses else None


@dataclass(frozen=True)
class Retention:
    keep_last: int


def apply_retention(root: Path, policy: Retention) -> list[Path]:
    """Keep the last K checkpoints and the best by eval loss; delete the rest. Returns what was deleted."""
    ckpts = list_checkpoints(root)
    keep = set(ckpts[-policy.keep_last:])
    scored = [(loss, c) for c in ckpts if (loss := eval_loss_at(c)) is not None]
    if scored:
        keep.add(min(scored, key=lambda t: t[0])[1])
    deleted = [c for c in ckpts if c not in keep]
    for c in deleted:
        # Rename first so a kill mid-delete never leaves a half checkpoint under a real name.
        doomed = root / f".{c.name}.deleting"
        os.replace(c, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return deleted
