"""Run a generated SkyPilot task on this machine, as SkyPilot would on the rented one.

The task is built with its remote root and checkpoint folder inside a sandbox folder, so every path
in it (file_mounts, setup, run, the uploaded plan and config) is a real path here. The file_mounts
are copied, the bucket is a folder, and setup and run are executed by bash with the task's envs.
Setup makes the task's own venv and pip-installs the wheel the task ships into it; PYTHONPATH lets that
venv see this environment's packages (torch, transformers, ...: the lock's versions) but not this
checkout's cheaptune, and pip reaches no index.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Sandbox:
    root: Path
    task: dict
    env: dict[str, str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    def setup(self, log: Path) -> int:
        return self._bash("setup", log).wait(timeout=600)

    def start_run(self, log: Path) -> subprocess.Popen:
        return self._bash("run", log)

    def _bash(self, key: str, log: Path) -> subprocess.Popen:
        with open(log, "ab") as f:  # a file, not a pipe: a full pipe would block the trainer
            return subprocess.Popen(["bash", "-c", self.task[key]], cwd=self.home, env=self.env, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)


def terminate(proc: subprocess.Popen) -> None:
    """What a preemption does: SIGTERM to every process of the run."""
    os.killpg(proc.pid, signal.SIGTERM)


def _venv_with_current_packages(root: Path) -> Path:
    """A venv whose site-packages links every package of this one except cheaptune. The links live
    inside the venv (libraries such as dill treat modules outside sys.prefix as user code); with no
    index reachable pip can only add packages, never replace a linked one."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().startswith(("cheaptune", "__editable__")):
            continue  # the task must install its own cheaptune
        (site / entry.name).symlink_to(entry)
    return venv


def materialise(task: dict, root: Path) -> Sandbox:
    """Copy the task's file_mounts (all under `root`), make its bucket a folder, prepare bash's env."""
    for dst, src in task["file_mounts"].items():
        target = Path(dst)
        assert target.is_relative_to(root), f"{dst} would land outside the sandbox"
        if isinstance(src, dict):  # a bucket mount
            target.mkdir(parents=True, exist_ok=True)
        elif Path(src).is_dir():
            shutil.copytree(src, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    venv = _venv_with_current_packages(root)
    (root / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    site = next(venv.glob("lib/python*/site-packages"))
    env.update({k: str(v) for k, v in (task.get("envs") or {}).items()})
    env.update({
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "HOME": str(root / "home"),
        "CHEAPTUNE_HOME": str(root / "home" / ".cheaptune"), "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(site),
    })
    return Sandbox(root, task, env)
