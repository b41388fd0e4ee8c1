"""Check what will run before SkyPilot is paid for: the remote plan and config through `train`'s own
validation, the plan's settings against its estimate, and the secrets by name (never their values).

SkyPilot's schema check says the task YAML is well-formed; these say that `cheaptune train` on the
machine accepts what the task hands it, with the paths it will see there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cheaptune.errors import BadInput
from cheaptune.launch.options import LaunchOptions
from cheaptune.plan.planfile import Offer, PlanFile

if TYPE_CHECKING:
    from cheaptune.train.config import TrainConfig

GATED_FILE = Path(__file__).parent / "data" / "gated.yaml"
_FIX = "fix the plan (re-plan with `cheaptune plan ... --save`) or the --config file"


@dataclass
class Checked:
    """What the dry run reports besides the YAML: secret names set and unset here."""

    secrets_set: list[str]
    secrets_unset: list[str]


def check_plan(plan: PlanFile, offers: list[Offer]) -> None:
    """The plan's estimate fits every GPU the task may get (an override may have changed the GPU)."""
    from cheaptune.catalog.gpus import resolve_gpu

    peak = plan.prediction.peak_vram_bytes
    for o in offers:
        memory = resolve_gpu(o.gpu).memory_bytes
        if peak > memory:
            raise BadInput(f"the plan's estimated peak {peak / 2**30:.1f} GiB per GPU does not fit {o.gpu} "
                           f"({memory / 2**30:.0f} GiB); re-plan for that GPU instead of overriding it")


def check_run(staging: Path, opts: LaunchOptions, price_per_hour: float) -> None:
    """Build the config exactly as the task's `cheaptune train` line will (remote config + plan + its
    flags) through train's validation; any problem is one line naming what to fix."""
    from cheaptune.train.config import build, check_before_load

    flags = {"resume": "auto", "checkpoint_dir": opts.checkpoint_dir, "price_per_hour": price_per_hour}
    try:
        cfg = build(staging / "config.yaml", staging / "plan.yaml", flags)
        check_before_load(cfg)  # as cli/train.py does before any model loads
    except BadInput as err:
        msg = str(err).replace(f"config file {staging / 'config.yaml'}", "train config")
        raise BadInput(f"`cheaptune train` on the machine would refuse this: {msg}; {_FIX}") from None
    _check_packages(cfg, staging / "plan.yaml")
    plan_train = _plan_settings(staging / "plan.yaml")
    built = {"method": cfg.method, "micro_batch": cfg.micro_batch_size, "grad_accum": cfg.gradient_accumulation_steps,
             "seq_len": cfg.sequence_len, "grad_ckpt": cfg.gradient_checkpointing}
    drift = {k: (plan_train[k], v) for k, v in built.items() if plan_train[k] != v}
    if drift:
        said = ", ".join(f"{k} {a} planned, {b} run" for k, (a, b) in drift.items())
        raise BadInput(f"the run would not be the one the plan sized ({said}); re-plan with those settings")


def _check_packages(cfg: TrainConfig, plan_path: Path) -> None:
    """The task installs the extras the plan's settings need (launch.task.extras); a config that turns on more
    (liger_kernel, torch_compile, attn: flash, an 8-bit optimizer) would be refused by train's speedups.check on
    the machine, after the boot and install were paid for."""
    from cheaptune.launch.task import extras
    from cheaptune.plan.planfile import load
    from cheaptune.train.settings import from_config

    plan = load(plan_path)
    t = plan.train
    try:
        run = from_config(cfg, t.precision, t.gpus, t.sharding)
    except ValueError:  # an optimizer the estimator does not know: transformers' own name, no extra to install
        return
    missing = [e for e in extras(plan.model_copy(update={"train": run})) if e not in extras(plan)]
    if missing:
        raise BadInput(f"the config needs cheaptune[{','.join(missing)}] on the machine and the task installs only "
                       f"what the plan's settings need ({','.join(extras(plan)) or 'no extras'}), so train there would "
                       "refuse it; re-plan with those settings (`cheaptune plan ... --save`) or drop them from the config")


def _plan_settings(path: Path) -> dict:
    from cheaptune.plan.planfile import load

    t = load(path).train
    return {"method": t.method, "micro_batch": t.micro_batch, "grad_accum": t.grad_accum, "seq_len": t.seq_len,
            "grad_ckpt": t.grad_ckpt}


def check_secrets(opts: LaunchOptions, env: Mapping[str, str] | None = None) -> Checked:
    """Which secret names have a value here (those are passed at launch); values are never read out."""
    env = os.environ if env is None else env
    have = [s for s in opts.secrets if env.get(s)]
    return Checked(secrets_set=have, secrets_unset=[s for s in opts.secrets if s not in have])


def gated_owners() -> dict:
    """Hub owners whose repos are gated, with the public reports that say so (data/gated.yaml)."""
    import yaml

    return yaml.safe_load(GATED_FILE.read_text(encoding="utf-8"))["owners"]


def check_model_access(hub_model: str | None, checked: Checked) -> None:
    """A gated hub model needs HF_TOKEN on the machine: with none passed, the paid run would fail at its
    download, so say it now."""
    if hub_model is None or "HF_TOKEN" in checked.secrets_set:
        return
    owner = hub_model.split("/")[0].lower()
    if owner in {o.lower() for o in gated_owners()}:
        raise BadInput(f"model {hub_model} is gated on the Hugging Face hub and HF_TOKEN is not set here, so the "
                       f"machine could not download it: accept its licence at https://huggingface.co/{hub_model}, "
                       "export HF_TOKEN and launch again (or pass a local copy with --model DIR)")
