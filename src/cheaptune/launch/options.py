"""What `cheaptune launch` takes besides the plan, in one typed place, with the remote layout."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cheaptune.errors import BadInput

# Where things live on the rented machine (job files, data, model, package under one root). The
# checkpoint folder is a bucket mount, so a managed job that SkyPilot relaunches after a preemption
# finds the last checkpoint at the same path.
REMOTE_ROOT = "/cheaptune"
DEFAULT_CHECKPOINT_DIR = f"{REMOTE_ROOT}/checkpoints"

# Secrets the trainer may need; only their NAMES go in the task, values come from our environment.
DEFAULT_SECRETS = ("HF_TOKEN", "WANDB_API_KEY", "CHEAPTUNE_WEBHOOK_URL")
BUCKET_MODES = ("MOUNT_CACHED", "MOUNT")
# SkyPilot 0.14's object stores a bucket can live in (sky.data.storage.StoreType, less HF and VOLUME).
STORES = ("s3", "gcs", "azure", "r2", "ibm", "oci", "nebius", "coreweave", "vastdata")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_URI = re.compile(r"^(s3|gs|r2|cos|oci|https)://\S+$")
_TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}[a-z0-9]$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class LaunchOptions:
    """Everything the task builder needs beyond the plan; validated by `check()`."""

    mode: Literal["job", "cluster"] = "job"
    name: str | None = None
    cluster: str | None = None
    config: Path | None = None
    checkpoint_dir: str = DEFAULT_CHECKPOINT_DIR
    bucket: str | None = None
    bucket_mode: str = "MOUNT_CACHED"
    margin: float = 0.10
    secrets: tuple[str, ...] = DEFAULT_SECRETS
    idle_minutes: int = 10
    max_restarts_on_errors: int = 1
    install: str | None = None
    index_url: str | None = None
    remote_root: str = REMOTE_ROOT
    disk_gb: int | None = None
    max_hourly_cost: float | None = None
    store: str | None = None  # the checkpoint bucket's object store (default: the offers' cloud's own)
    budget: float | None = None  # launch --budget: wins over the plan's and the config's (task.with_run_budget)
    sky_catalog: Path | None = None  # SkyPilot's catalog folder for region checks (default: its own cache)

    @property
    def job_dir(self) -> str:
        """The plan and train config as they run (rewritten to remote paths)."""
        return f"{self.remote_root}/job"

    @property
    def data_dir(self) -> str:
        return f"{self.remote_root}/data"

    @property
    def model_dir(self) -> str:
        return f"{self.remote_root}/model"

    @property
    def venv_dir(self) -> str:
        """The virtual environment cheaptune is installed into and runs from."""
        return f"{self.remote_root}/venv"

    @property
    def pkg_dir(self) -> str:
        """The cheaptune wheel the machine installs."""
        return f"{self.remote_root}/pkg"

    def check(self) -> LaunchOptions:
        """Report a bad option as one line before anything is written."""
        if self.mode == "cluster" and not self.cluster:
            raise BadInput("cluster mode needs a cluster name: pass --cluster NAME")
        if self.name and not _TASK_NAME.match(self.name):
            raise BadInput(f"--name {self.name!r} must be 2-42 lowercase letters, digits or '-' (it names the bucket)")
        if not 0 <= self.margin <= 1:  # NaN fails too
            raise BadInput(f"--margin {self.margin} must be between 0 and 1 (0.10 = within 10% of the best)")
        if not self.checkpoint_dir.startswith("/") or self.checkpoint_dir.rstrip("/") == "":
            raise BadInput(f"--checkpoint-dir {self.checkpoint_dir!r} must be an absolute path on the remote machine")
        if not self.remote_root.startswith("/"):
            raise BadInput(f"remote root {self.remote_root!r} must be an absolute path")
        if self.index_url is not None and not self.index_url.startswith(("https://", "http://", "file://")):
            raise BadInput(f"--index-url {self.index_url!r} must be a URL (https://...) of a package index")
        if self.store is not None and self.store not in STORES:
            raise BadInput(f"--store {self.store!r} must be one of {', '.join(STORES)}")
        if self.bucket_mode not in BUCKET_MODES:
            raise BadInput(f"--bucket-mode {self.bucket_mode!r} must be one of {', '.join(BUCKET_MODES)}")
        if self.bucket and not (_BUCKET_NAME.match(self.bucket) or _URI.match(self.bucket)):
            raise BadInput(
                f"--bucket {self.bucket!r} must be a bucket name (3-63 lowercase letters, digits, '-', '.') "
                "or a URI such as s3://my-bucket"
            )
        bad = [s for s in self.secrets if not _ENV_NAME.match(s)]
        if bad:
            raise BadInput(f"--secret {bad[0]!r} must be an environment variable NAME (the value stays local)")
        if self.idle_minutes < 1:
            raise BadInput("--idle-minutes must be at least 1")
        if self.disk_gb is not None and self.disk_gb < 16:
            raise BadInput(f"--disk-gb {self.disk_gb} is too small; give at least 16 (GB)")
        if self.max_hourly_cost is not None and not 0 < self.max_hourly_cost < float("inf"):
            raise BadInput(f"--max-hourly-cost must be a positive USD amount (got {self.max_hourly_cost!r})")
        if self.config is not None and not Path(self.config).is_file():
            raise BadInput(f"train config {self.config} not found; pass an existing YAML with --config")
        return self
