"""The files a remote run needs: the plan and train config rewritten to remote paths, what to upload, disk size.

The plan and config name local files (dataset, model folder); on the rented machine those live under
/cheaptune, so launch writes remote copies into a staging folder that SkyPilot uploads as one mount.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cheaptune.errors import BadInput, CheaptuneError
from cheaptune.launch.options import LaunchOptions
from cheaptune.plan.planfile import PlanFile
from cheaptune.util import atomic
from cheaptune.util.yamlfile import with_reward_files

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
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, as the hub spells repo ids
_MODEL_KEYS = ("base_model", "model_name_or_path", "model")  # train.config's names for the base model
CONSTRAINTS = "constraints.txt"  # in the job folder: the pins setup installs with (launch.lock)


@dataclass
class Staged:
    """Remote plan/config texts, local->remote uploads, and the byte counts the disk size comes from."""

    plan_text: str
    config_text: str
    uploads: dict[str, str] = field(default_factory=dict)
    model_bytes: int | None = None
    data_bytes: int = 0
    hub_model: str | None = None  # the hub id the machine downloads (None: a local folder is uploaded)
    constraints: str = ""  # pip constraints for the machine's install (launch.lock)


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


def remote_model(model: str) -> str | None:
    """What `from_pretrained` gets on the machine: a hub id (an alias resolved to its id), or None
    for a local folder (uploaded). A missing path, a lone file or an unknown name is an error now."""
    local = Path(model).expanduser()
    if local.is_dir():
        return None
    if local.exists():
        raise BadInput(f"model {model} is a file; training needs the model folder (config.json + weights)")
    from cheaptune.catalog.models import list_models, resolve_model

    if _HUB_ID.match(model):
        resolve_model(model)  # checked as `plan` checks it: the catalog, else the hub's config.json
        low = model.lower()
        return next((s.id for s in list_models() if low == s.id.lower()), model)  # hub ids stay ids
    return resolve_model(model).id  # an alias -> its hub id; a missing path or unknown name -> BadInput


def _dataset(path: str, what: str) -> Path:
    local = Path(path).expanduser()
    if not local.exists():
        raise BadInput(f"{what} {path} not found (relative paths are read from {Path.cwd()}); "
                       "give an existing file or folder")
    return local.resolve()


def _read_config(path: Path) -> dict:
    from cheaptune.train.config import check_keys, read_yaml

    config = read_yaml(path)
    check_keys(config, f"train config {path}")
    return config


def stage(plan: PlanFile, opts: LaunchOptions) -> Staged:
    """Rewrite every local path (model folder, datasets, eval_data, reward files) to its remote path and list the uploads;
    nothing is written here. What cannot be found is an error before anything is launched."""
    uploads: dict[str, str] = {}
    remote_plan = plan.model_copy(deep=True)
    config = _read_config(Path(opts.config)) if opts.config is not None else {}
    key = next((k for k in _MODEL_KEYS if config.get(k)), None)
    model = str(config[key]) if key else plan.model
    remote = hub = remote_model(model)
    if remote is None:
        uploads[opts.model_dir] = str(Path(model).expanduser().resolve())
        remote = opts.model_dir
    remote_plan.model = remote
    if key:
        config[key] = remote

    entries = config.get("datasets") or []
    if not isinstance(entries, list):
        raise BadInput(f"train config {opts.config}: datasets must be a list of {{path: ...}} entries")
    if not entries and plan.dataset:
        entries = [{"path": plan.dataset}]
    if not entries:
        raise BadInput("no dataset to train on (the plan was made from a token count): pass --data FILE, "
                       "or --config with datasets: [{path: ...}]")
    data_bytes, remote_data, by_local = 0, [], {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "path" not in entry:
            raise BadInput(f"train config {opts.config}: each datasets entry needs a path (got {entry!r})")
        local = _dataset(str(entry["path"]), "dataset")
        target = by_local.get(local)
        if target is None:
            target = f"{opts.data_dir}/{local.name}"
            if target in uploads:  # two files of one name from different folders
                target = f"{opts.data_dir}/{i}-{local.name}"
            uploads[target], by_local[local] = str(local), target
            data_bytes += _size(local)
        remote_data.append({**entry, "path": target})
    remote_plan.dataset = remote_data[0]["path"]

    def upload(item: str, what: str, prefix: str) -> str:
        """A further local file the run reads on the machine, uploaded once beside the datasets."""
        nonlocal data_bytes
        local = _dataset(item, what)
        if local not in by_local:
            by_local[local] = f"{opts.data_dir}/{prefix}-{local.name}"
            uploads[by_local[local]] = str(local)
            data_bytes += _size(local)
        return by_local[local]

    if isinstance(config.get("eval_data"), str) and config["eval_data"]:  # eval_after's file (train.run)
        config["eval_data"] = upload(config["eval_data"], "eval_data", "eval")
    config = with_reward_files(config, lambda item: upload(item, "reward file", "reward"))  # train.rewards
    if config.get("datasets"):
        config["datasets"] = remote_data
    # Managed jobs: the jobs controller tears the cluster down when the job ends, and a VM that shut
    # itself down would look like a preemption and be relaunched. Clusters shut down on finish
    # (autodown backs it up). The final adapter goes next to the checkpoints, into the bucket.
    config["on_finish"] = "nothing" if opts.mode == "job" else "terminate"
    config["output_dir"] = f"{opts.checkpoint_dir.rstrip('/')}/final"
    from cheaptune.launch.lock import constraints

    return Staged(
        plan_text=yaml.safe_dump(remote_plan.model_dump(mode="json"), sort_keys=False),
        config_text=yaml.safe_dump(config, sort_keys=False),
        uploads=uploads,
        model_bytes=_model_bytes(model),
        data_bytes=data_bytes,
        hub_model=hub,
        constraints=constraints().text,
    )


def write_staging(staged: Staged, folder: Path, check: Callable[[Path], None] | None = None) -> None:
    """Write the remote plan and config into the folder SkyPilot uploads; `check(tmp_folder)` runs on
    the complete files first, and if it raises the folder is left as it was."""
    with atomic.atomic_dir(folder) as tmp:
        (tmp / "plan.yaml").write_text(staged.plan_text)
        (tmp / "config.yaml").write_text(staged.config_text)
        if staged.constraints:
            (tmp / CONSTRAINTS).write_text(staged.constraints)
        if check is not None:
            check(tmp)


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
