"""The files a remote run needs: the plan and train config rewritten to remote paths, what to upload, disk size.

The plan and config name local files (dataset, model folder); on the rented machine those live under
/cheaptune, so launch writes remote copies into a staging folder that SkyPilot uploads as one mount.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cheaptune.errors import BadInput, CheaptuneError
from cheaptune.launch.options import REMOTE_DATA, REMOTE_MODEL, LaunchOptions
from cheaptune.plan.planfile import PlanFile
from cheaptune.util import atomic

GB = 1000**3
# Our own allowances (not outside figures): OS image + CUDA torch + pip cache, and slack on the total.
BASE_DISK_GB = 60
DISK_MARGIN = 1.25
SKYPILOT_DEFAULT_DISK_GB = 256  # sky/resources.py DEFAULT_DISK_SIZE_GB in skypilot 0.14.1
KEPT_CHECKPOINTS = 3  # the trainer's save_total_limit default (train.config)
# Bytes per parameter in a checkpoint: bf16 weights + fp32 Adam moments + fp32 master copy for full
# fine-tuning; adapters are a small fraction of the weights, with their optimizer state.
FULL_CKPT_BYTES_PER_PARAM = 14
ADAPTER_CKPT_FRACTION = 0.05


@dataclass
class Staged:
    """Remote plan/config texts, local->remote uploads, and the byte counts the disk size comes from."""

    plan_text: str
    config_text: str
    uploads: dict[str, str] = field(default_factory=dict)
    model_bytes: int | None = None
    data_bytes: int = 0


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _model_bytes(model: str) -> int | None:
    """Weights on disk: a local folder's files, else bf16 x params from the model catalog; None if unknown."""
    local = Path(model).expanduser()
    if local.is_dir():
        return _size(local)
    try:
        from cheaptune.catalog.models import resolve_model

        return resolve_model(model).params * 2
    except (CheaptuneError, ImportError, KeyError):
        return None


def stage(plan: PlanFile, opts: LaunchOptions) -> Staged:
    """Rewrite local paths to remote ones and list the uploads; nothing is written here."""
    uploads: dict[str, str] = {}
    remote_plan = plan.model_copy(deep=True)
    data_bytes = 0
    if plan.dataset and Path(plan.dataset).expanduser().exists():
        local = Path(plan.dataset).expanduser().resolve()
        remote = f"{REMOTE_DATA}/{local.name}"
        uploads[remote] = str(local)
        remote_plan.dataset = remote
        data_bytes += _size(local)
    model_bytes = _model_bytes(plan.model)
    if Path(plan.model).expanduser().is_dir():
        uploads[REMOTE_MODEL] = str(Path(plan.model).expanduser().resolve())
        remote_plan.model = REMOTE_MODEL

    config: dict = {}
    if opts.config is not None:
        try:
            config = yaml.safe_load(Path(opts.config).read_text()) or {}
        except yaml.YAMLError as err:
            raise BadInput(f"train config {opts.config} is not valid YAML: {err}") from None
        if not isinstance(config, dict):
            raise BadInput(f"train config {opts.config} must be a YAML mapping")
        for i, entry in enumerate(config.get("datasets") or []):
            path = Path(str(entry.get("path", ""))).expanduser() if isinstance(entry, dict) else None
            if path is not None and path.exists():
                remote = f"{REMOTE_DATA}/{i}-{path.name}"
                uploads[remote] = str(path.resolve())
                entry["path"] = remote
                data_bytes += _size(path)
    # Managed jobs: the jobs controller tears the cluster down when the job ends, and a VM that shut
    # itself down would look like a preemption and be relaunched. Clusters shut down on finish
    # (autodown backs it up). The final adapter goes next to the checkpoints, into the bucket.
    config["on_finish"] = "nothing" if opts.mode == "job" else "terminate"
    config["output_dir"] = f"{opts.checkpoint_dir.rstrip('/')}/final"
    return Staged(
        plan_text=yaml.safe_dump(remote_plan.model_dump(mode="json"), sort_keys=False),
        config_text=yaml.safe_dump(config, sort_keys=False),
        uploads=uploads,
        model_bytes=model_bytes,
        data_bytes=data_bytes,
    )


def write_staging(staged: Staged, folder: Path) -> None:
    """Write the remote plan and config (atomically) into the folder SkyPilot uploads."""
    atomic.write_text(folder / "plan.yaml", staged.plan_text)
    atomic.write_text(folder / "config.yaml", staged.config_text)


def disk_size_gb(plan: PlanFile, staged: Staged) -> int:
    """Disk for image + env, the model download, the dataset (x2 for the tokenized cache) and kept checkpoints.

    Checkpoints are counted because MOUNT_CACHED stages writes on local disk before uploading them.
    Unknown model size -> SkyPilot's own default, which is larger than any small-model estimate.
    """
    if staged.model_bytes is None:
        return SKYPILOT_DEFAULT_DISK_GB
    weights = staged.model_bytes
    if plan.train.method == "full":
        ckpt = weights / 2 * FULL_CKPT_BYTES_PER_PARAM
    else:
        ckpt = weights * ADAPTER_CKPT_FRACTION
    total = weights + 2 * staged.data_bytes + KEPT_CHECKPOINTS * ckpt
    return int(math.ceil((BASE_DISK_GB + total / GB) * DISK_MARGIN / 10.0) * 10)
