"""Launch orchestration: plan -> staged files + validated task YAML -> SkyPilot -> registry record.

Reads top to bottom: load and check, stage, build, validate, (launch, record). The backend is passed
in, so tests run the whole path with a recording double in place of SkyPilot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from cheaptune.errors import BadInput
from cheaptune.launch import verify
from cheaptune.launch.backend import Backend, LaunchedPrice, LaunchResult
from cheaptune.launch.options import LaunchOptions
from cheaptune.launch.regions import skypilot_catalog_dir
from cheaptune.launch.stage import stage, write_staging
from cheaptune.launch.task import (
    BILLED_ENV,
    Selection,
    build_task,
    offer_prices,
    resource_entries,
    select_offers,
    task_name,
    with_run_budget,
)
from cheaptune.launch.verify import Checked
from cheaptune.plan.planfile import Offer, PlanFile
from cheaptune.runs.billed import EVENT, BilledRate
from cheaptune.util import atomic
from cheaptune.util.paths import home


@dataclass
class Prepared:
    plan: PlanFile
    task: dict
    selection: Selection
    yaml_path: Path
    staging_dir: Path
    checked: Checked


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as YAML block scalars, so the task reads like a hand-written one."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _str)


def dump_yaml(task: dict) -> str:
    return yaml.dump(task, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


def task_path(out: str | Path | None, name: str) -> Path:
    """Where the task YAML goes. A folder (`--out .`, `--out ''`, an existing directory) is refused before
    anything is written: the staging folder beside it would be a hidden `.files` in it and the YAML itself could
    not be written there."""
    if out is None:
        return home() / "launch" / name / "task.yaml"
    path = Path(out)
    if not str(out).strip() or not path.stem or path.is_dir():
        raise BadInput(f"--out {str(out)!r} is a folder, not a file: give the task YAML's path, "
                       f"e.g. --out {path / 'task.yaml'}")
    return path


def prepare(plan: PlanFile, opts: LaunchOptions, backend: Backend, out: str | Path | None = None,
            env: Mapping[str, str] | None = None) -> Prepared:
    """Stage the files and write the task YAML, after checking what will run: the plan against its
    estimate, the remote plan and config through train's validation, the YAML through SkyPilot's."""
    opts.check()
    plan = with_run_budget(plan, opts)  # the cap train runs under there, so the offers are held to it here
    if opts.sky_catalog is None:
        opts = replace(opts, sky_catalog=skypilot_catalog_dir())
    name = task_name(plan, opts)
    yaml_path = task_path(out, name)
    staging_dir = yaml_path.parent / f"{yaml_path.stem}.files"
    sel = select_offers(plan, opts.margin)
    verify.check_plan(plan, sel.offers)
    resource_entries(sel.offers, opts.sky_catalog)  # regions in SkyPilot's spelling, before anything is written
    staged = stage(plan, opts)
    checked = verify.check_secrets(opts, env)
    verify.check_model_access(staged.hub_model, checked)
    price = max(offer_prices(sel.offers).values())  # what the run line's meter uses when the cloud is unknown
    write_staging(staged, staging_dir, check=lambda tmp: verify.check_run(tmp, opts, price))
    task, sel = build_task(plan, staged, str(staging_dir.resolve()), opts)
    text = dump_yaml(task)
    atomic.write_text(yaml_path, text, check=backend.validate)  # SkyPilot validates before it replaces `out`
    return Prepared(plan, task, sel, yaml_path, staging_dir, checked)


def describe(offer: Offer) -> str:
    kind = "spot" if offer.spot else offer.kind
    return f"{offer.provider}/{offer.region} {offer.gpu}:{offer.gpu_count} {kind} ${offer.price_per_hour:g}/h"


def launch(
    plan: PlanFile, opts: LaunchOptions, backend: Backend, out: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict:
    """Launch through the backend and record the run; returns what was launched, for printing."""
    env = os.environ if env is None else env
    prep = prepare(plan, opts, backend, out, env)
    secrets = {k: env[k] for k in prep.checked.secrets_set}
    unset = prep.checked.secrets_unset
    task = dict(prep.task)
    if "secrets" in task:
        # A name with no value would be looked up in a secrets manager at launch; leave unset ones out.
        task["secrets"] = {k: None for k in secrets} or None
        if task["secrets"] is None:
            del task["secrets"]
    name = task["name"]
    if opts.mode == "cluster":
        # Provision and set up first, then run with the rate SkyPilot says the cluster it got costs.
        cluster = opts.cluster or name
        result = backend.launch_cluster({k: v for k, v in task.items() if k != "run"}, secrets, cluster,
                                        opts.idle_minutes)
        price = backend.launched_price(result)
        result = backend.exec_cluster(run_task(task, price), secrets, cluster)
    else:
        result = backend.launch_job(task, secrets, name)
        price = backend.launched_price(result)
    run_id, billed = _record(prep, opts, result, unset, price)
    return {
        "run_id": run_id, "name": name, "mode": opts.mode, "job_id": result.job_id, "cluster": result.cluster,
        "task_yaml": str(prep.yaml_path), "offers": [describe(o) for o in prep.selection.offers],
        "skipped": prep.selection.skipped, "notes": prep.selection.notes, "unset_secrets": unset,
        "planned_per_hour": billed.planned if billed else None, "billed_per_hour": billed.billed if billed else None,
        "billed_line": billed.line(prep.plan.prediction.cost.total, prep.plan.budget_usd)
        if billed and billed.over else None,
    }


def run_task(task: dict, price: LaunchedPrice | None) -> dict:
    """The run of a set-up cluster as its own task: the same run line and envs (plus the billed rate for the
    meter), on the accelerators the cluster got (a task without them would see no GPU)."""
    envs = dict(task.get("envs") or {})
    res = task["resources"]
    entries = res.get("any_of") or [res]
    accs = price.accelerators if price and price.accelerators else None
    if accs is None and len({e["accelerators"] for e in entries}) == 1:
        accs = entries[0]["accelerators"]
    if price is not None:
        envs[BILLED_ENV] = f"{price.per_hour:.6g}"
    out = {"name": task["name"], "envs": envs, "run": task["run"], **({"resources": {"accelerators": accs}} if accs else {})}
    for key in ("secrets", "num_nodes"):
        if key in task:
            out[key] = task[key]
    return out


def billed_rate(plan: PlanFile, offers: list[Offer], price: LaunchedPrice) -> BilledRate:
    """The launched price against the plan's for the cloud it landed on (the highest of the chosen offers
    when that cloud is not among them)."""
    planned = offer_prices(offers)
    return BilledRate(planned.get(price.cloud, max(planned.values())), price.per_hour, price.source)


def remote_ref(mode: str, result: LaunchResult) -> str:
    """How the registry names a launched run: the managed job id, or the cluster and its job id."""
    if mode == "job":
        return f"skypilot:job/{result.job_id}"
    return f"skypilot:cluster/{result.cluster}/{result.job_id}"


def _record(prep: Prepared, opts: LaunchOptions, result: LaunchResult, unset: list[str],
            price: LaunchedPrice | None) -> tuple[str, BilledRate | None]:
    from cheaptune.runs.registry import Registry

    plan, offer = prep.plan, prep.plan.offer
    run = Registry().start_run(
        name=prep.task["name"], model=plan.model, method=plan.train.method, gpu=offer.gpu,
        gpu_count=offer.gpu_count * offer.num_nodes, provider=offer.provider, offer=describe(offer),
        price_per_hour=offer.price_per_hour * offer.num_nodes, budget_usd=plan.budget_usd,
        cost_predicted_usd=plan.prediction.cost.total, peak_mem_predicted=plan.prediction.peak_vram_bytes,
        output_dir=opts.checkpoint_dir, remote=remote_ref(opts.mode, result),
    )
    run.event("launched", {
        "backend": "skypilot", "mode": opts.mode, "job_id": result.job_id, "cluster": result.cluster,
        "task_yaml": str(prep.yaml_path), "failover": [describe(o) for o in prep.selection.offers[1:]],
        "unset_secrets": unset,
    })
    if price is None:
        return run.id, None
    billed = billed_rate(plan, prep.selection.offers, price)
    run.event(EVENT, billed.detail(plan.prediction.cost.total, plan.budget_usd))
    if billed.over:
        run.update(cost_projected_usd=billed.projected(plan.prediction.cost.total))
    return run.id, billed


# SkyPilot managed-job statuses -> our registry's; anything not listed (PENDING, STARTING, ...) stays "launched".
_JOB_STATUS = {
    "RUNNING": "running", "RECOVERING": "running", "SUCCEEDED": "finished", "CANCELLED": "killed",
    "FAILED": "failed", "FAILED_SETUP": "failed", "FAILED_PRECHECKS": "failed", "FAILED_NO_RESOURCE": "failed",
    "FAILED_CONTROLLER": "failed",
}


def sync_status(rows: list[dict]) -> int:
    """Copy what `sky jobs queue` reports into the registry's launched runs; returns how many changed."""
    from cheaptune.runs.registry import Registry

    registry, changed = Registry(), 0
    for row in rows:
        status = _JOB_STATUS.get(str(row.get("status") or "").upper().removeprefix("MANAGEDJOBSTATUS."))
        if status and row.get("job_id") is not None:
            changed += registry.set_remote_status(f"skypilot:job/{row['job_id']}", status)
    return changed
