"""What to run when training ends so an idle GPU stops billing: presets per platform, or your own command.

on_finish: "nothing" | "stop" (billing for the GPU stops, the disk is kept) | "terminate" (everything goes).
Presets (`auto` picks one from the environment; plain-VM shutdown is never guessed on a machine that
does not look like a cloud VM, so a laptop is not powered off by accident):

- skypilot (SKYPILOT_CLUSTER_INFO / SKYPILOT_TASK_ID set): `sky autostop CLUSTER -i 0 [--down] -y`, so the
  cluster's own skylet stops (or tears down) the cluster as soon as the job has exited. Managed jobs
  (`sky jobs launch`) need nothing: their controller tears the cluster down when the job ends.
- runpod (RUNPOD_POD_ID): `runpodctl stop pod ID` / `runpodctl remove pod ID`.
- vast (CONTAINER_ID, VAST_CONTAINERLABEL): `vastai stop instance ID` / `vastai destroy instance ID`
  (the vastai CLI must hold an API key: `vastai set api-key`).
- vm: `shutdown -h now` for both; whether a powered-off VM is only stopped or also deleted is the
  instance's shutdown behaviour setting at the cloud (AWS: InstanceInitiatedShutdownBehavior).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from cheaptune.errors import BadInput

log = logging.getLogger("cheaptune.runs")

ON_FINISH = ("nothing", "stop", "terminate")
PRESETS = ("auto", "skypilot", "runpod", "vast", "vm", "custom")
# Words in /sys/class/dmi/id/* that mark a cloud VM (AWS, GCP, Azure, OpenStack-based GPU clouds, ...).
_CLOUD_DMI = ("amazon", "ec2", "google", "microsoft", "openstack", "kvm", "qemu", "digitalocean", "oracle", "xen")


def detect_platform(env: Mapping[str, str] | None = None, dmi_dir: str = "/sys/class/dmi/id") -> str | None:
    """The platform we run on, from its environment variables; None when it cannot be told."""
    env = os.environ if env is None else env
    if env.get("SKYPILOT_CLUSTER_INFO") or env.get("SKYPILOT_TASK_ID"):
        return "skypilot"
    if env.get("RUNPOD_POD_ID"):
        return "runpod"
    if env.get("CONTAINER_ID") and (env.get("VAST_CONTAINERLABEL") or env.get("CONTAINER_API_KEY")):
        return "vast"
    texts = []
    for name in ("sys_vendor", "product_name", "bios_vendor"):
        try:
            texts.append((Path(dmi_dir) / name).read_text().lower())
        except OSError:
            continue
    if any(word in text for text in texts for word in _CLOUD_DMI):
        return "vm"
    return None


def shutdown_command(on_finish: str, preset: str = "auto", custom: list[str] | None = None,
                     env: Mapping[str, str] | None = None) -> list[str] | None:
    """The argument list that applies `on_finish`, or None for nothing to do; BadInput when it cannot be built."""
    if on_finish not in ON_FINISH:
        raise BadInput(f"on_finish must be one of {', '.join(ON_FINISH)} (got {on_finish!r})")
    if on_finish == "nothing":
        return None
    if custom:
        return [str(a) for a in custom]
    env = os.environ if env is None else env
    platform = detect_platform(env) if preset == "auto" else preset
    if platform is None:
        raise BadInput(
            f"on_finish={on_finish} but the platform could not be detected; pass --shutdown-preset "
            "skypilot|runpod|vast|vm or --shutdown-command"
        )
    down = on_finish == "terminate"
    if platform == "skypilot":
        if "managed" in env.get("SKYPILOT_TASK_ID", "") and not env.get("SKYPILOT_CLUSTER_INFO"):
            return None
        return ["sky", "autostop", _sky_cluster(env), "-i", "0", *(["--down"] if down else []), "-y"]
    if platform == "runpod":
        return ["runpodctl", "remove" if down else "stop", "pod", _need(env, "RUNPOD_POD_ID", platform)]
    if platform == "vast":
        return ["vastai", "destroy" if down else "stop", "instance", _need(env, "CONTAINER_ID", platform)]
    if platform == "vm":
        return ["shutdown", "-h", "now"]
    raise BadInput(f"unknown shutdown preset {platform!r}; use one of {', '.join(PRESETS)}")


def run_shutdown(command: list[str], dry_run: bool = False, timeout_s: float = 120.0) -> int | None:
    """Run the command (no shell, with a timeout) or, in a dry run, only print it; returns its exit code."""
    if dry_run:
        print("dry run: would run: " + " ".join(command))
        return None
    log.warning("on-finish: running %s", " ".join(command))
    try:
        return subprocess.run(command, timeout=timeout_s, check=False).returncode  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as err:
        log.error("on-finish command %s failed: %s", command[0], err)
        return None


def _sky_cluster(env: Mapping[str, str]) -> str:
    try:
        name = json.loads(env.get("SKYPILOT_CLUSTER_INFO", "")).get("cluster_name")
    except (json.JSONDecodeError, AttributeError):
        name = None
    if not name:
        raise BadInput("SKYPILOT_CLUSTER_INFO has no cluster_name; pass --shutdown-command instead")
    return str(name)


def _need(env: Mapping[str, str], var: str, platform: str) -> str:
    if not env.get(var):
        raise BadInput(f"shutdown preset {platform} needs ${var}; run inside the instance or pass --shutdown-command")
    return env[var]
