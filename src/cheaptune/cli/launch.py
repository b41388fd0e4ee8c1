"""`cheaptune launch`: run a plan on a rented GPU through SkyPilot (managed spot-safe job or a cluster)."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import bounded, nonempty, path
from cheaptune.cli.vocab import (
    Spot,
    budget_option,
    checkpoint_dir_option,
    gpu_count_option,
    json_option,
    spot_flag,
    spot_option,
)

GB_PER_GIB = 2**30 / 1e9  # SkyPilot sizes disks in GB


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)


def launch(
    plan: Path = typer.Argument(None, parser=path, help="Plan file from `cheaptune plan --save` (not needed with --status/--cancel)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write and validate the SkyPilot task YAML; launch nothing."),
    out: Path = typer.Option(None, "--out", parser=path, help="Where the task YAML goes (default: ~/.cheaptune/launch/NAME/task.yaml)."),
    config: Path = typer.Option(None, "--config", parser=path, help="Training config YAML for `cheaptune train` on the machine."),
    cluster: str = typer.Option(None, "--cluster", help="Launch as a cluster with this name (autodown) instead of a managed job."),
    name: str = typer.Option(None, "--name", callback=nonempty, help="Task name; also names the checkpoint bucket (default from the plan)."),
    gpu: str = typer.Option(None, "--gpu", callback=nonempty, help="Override the plan's GPU (any spelling; alternatives are dropped)."),
    gpu_count: int = gpu_count_option("Override the plan's GPU count."),
    provider: str = typer.Option(None, "--provider", callback=nonempty, help="Override the plan's provider (alternatives are dropped)."),
    region: str = typer.Option(None, "--region", callback=nonempty, help="Override the plan's region."),
    spot: Spot = spot_option("as the plan says"),
    model: str = typer.Option(None, "--model", callback=nonempty, help="Override the plan's model."),
    data: str = typer.Option(None, "--data", callback=nonempty, help="Override the plan's dataset file."),
    budget: float = budget_option("The run's cap in USD, over the plan's and the --config file's (without it: the "
                                  "lower of those two)."),
    margin: float = typer.Option(0.10, "--margin", help="Fail over to offers within this fraction of the best total cost."),
    checkpoint_dir: str = checkpoint_dir_option("Remote checkpoint folder (the bucket mount)."),
    bucket: str = typer.Option(None, "--bucket", help="Checkpoint bucket name or URI (s3://..., gs://...)."),
    bucket_mode: str = typer.Option("MOUNT_CACHED", "--bucket-mode", help="MOUNT_CACHED or MOUNT."),
    store: str = typer.Option(None, "--store", help="Object store of the checkpoint bucket: s3, gcs, azure, r2, ... "
                              "(default: the store of the cloud every offer runs on)."),
    secret: list[str] = typer.Option(None, "--secret", callback=nonempty, help="Secret env NAME passed from your environment (repeatable)."),
    idle_minutes: int = typer.Option(10, "--idle-minutes", help="Cluster autodown after this many idle minutes."),
    max_restarts: int = typer.Option(1, "--max-restarts", help="Managed job: restarts after a crash (not preemptions)."),
    install: str = typer.Option(None, "--install", help="pip spec or local wheel/folder for cheaptune on the machine "
                                "(default: a wheel of this cheaptune, or its version from the index it came from)."),
    index_url: str = typer.Option(None, "--index-url", help="Package index the machine installs from (with --install)."),
    disk_gib: int = typer.Option(None, "--disk-gib", callback=bounded(15, 10**5),
                                 help="Disk size in GiB (default: from model, dataset, checkpoints)."),
    max_hourly_cost: float = typer.Option(None, "--max-hourly-cost", help="Cap SkyPilot's instance price (USD/h)."),
    watch: bool = typer.Option(False, "--watch", help="Follow the managed job to its end; out of memory (train's exit 11) "
                               "re-launches it on the plan's next larger GPU, resuming from the same bucket."),
    max_failovers: int = typer.Option(2, "--max-failovers", callback=bounded(0, 10),
                                      help="With --watch: how many times to move to a larger GPU."),
    status: bool = typer.Option(False, "--status", help="Show managed jobs (or the job given with --job)."),
    cancel: int = typer.Option(None, "--cancel", help="Cancel this managed job id."),
    job: int = typer.Option(None, "--job", help="Job id for --status; with --watch, follow this launched job instead of launching."),
    as_json: bool = json_option(),
) -> None:
    """Launch a plan on the cheapest cloud GPU through SkyPilot; checkpoints go to a bucket so spot jobs resume.

    Exit codes: 0 launched (with --watch: finished), 2 bad input or no cloud enabled (run `sky check`), 3 over
    budget; with --watch also 10 stopped at the budget cap and 11 out of memory with no larger offer left.
    """
    import math

    from cheaptune.cli.output import emit_json
    from cheaptune.errors import BadInput
    from cheaptune.launch.backend import SkyBackend
    from cheaptune.launch.options import DEFAULT_CHECKPOINT_DIR, DEFAULT_SECRETS, LaunchOptions

    backend = SkyBackend()
    if status or cancel is not None:
        if cancel is not None:
            backend.cancel(cancel)
            result: object = {"cancelled": cancel}
        else:
            from cheaptune.launch.launcher import sync_status

            result = backend.status(job)
            sync_status(result)
        if as_json:
            emit_json(result)
        else:
            _print_status(result)
        return
    if plan is None:
        raise BadInput("give a plan file: cheaptune launch PLAN (make one with `cheaptune plan ... --save PLAN`)")

    from cheaptune.launch import launcher
    from cheaptune.launch.overrides import apply_overrides
    from cheaptune.plan.planfile import load

    plan_obj = apply_overrides(load(plan), gpu=gpu, gpu_count=gpu_count, provider=provider, region=region,
                               spot=spot_flag(spot), model=model, dataset=data, budget=budget)
    opts = LaunchOptions(
        mode="cluster" if cluster else "job", name=name, cluster=cluster, config=config,
        checkpoint_dir=checkpoint_dir or DEFAULT_CHECKPOINT_DIR, bucket=bucket, bucket_mode=bucket_mode, store=store,
        margin=margin, secrets=tuple(secret) if secret else DEFAULT_SECRETS, idle_minutes=idle_minutes,
        max_restarts_on_errors=max_restarts, budget=budget, install=install, index_url=index_url, disk_gb=None if disk_gib is None else math.ceil(disk_gib * GB_PER_GIB), max_hourly_cost=max_hourly_cost,
    )
    if dry_run:
        prep = launcher.prepare(plan_obj, opts, backend, out)
        info = {"task_yaml": str(prep.yaml_path), "name": prep.task["name"],
                "offers": [launcher.describe(o) for o in prep.selection.offers], "skipped": prep.selection.skipped,
                "notes": prep.selection.notes, "secrets_set": prep.checked.secrets_set, "secrets_unset": prep.checked.secrets_unset}
        if as_json:
            emit_json(info)
        else:
            typer.echo(f"wrote {info['task_yaml']} (checked by train's validation, the catalogs and SkyPilot's); "
                       f"offers: {'; '.join(info['offers'])}")
            typer.echo(f"secrets passed at launch: {', '.join(info['secrets_set']) or 'none'}; "
                       f"not set here: {', '.join(info['secrets_unset']) or 'none'}")
            for note in info["notes"]:
                typer.echo(f"note: {note}", err=True)
        return
    if watch and cluster:
        raise BadInput("--watch follows managed jobs; drop --cluster (a cluster is followed with `sky status`)")
    if watch and job is not None:
        from cheaptune.launch.watch import launched_job

        info = launched_job(plan_obj, opts, job)
    else:
        info = launcher.launch(plan_obj, opts, backend, out)
    if watch:
        from cheaptune.launch.watch import watch as follow

        typer.echo(f"watching {info['name']} (managed job {info['job_id']})", err=True)
        info = follow(plan_obj, opts, backend, info, max_failovers=max_failovers, out=out)
        if not as_json:
            moved = len(info["failovers"])
            typer.echo(f"managed job {info['job_id']} ({info['name']}) {info['final'].lower()}"
                       f"{f' after {moved} failover(s) to a larger GPU' if moved else ''}; run {info['run_id']}")
            return
    if as_json:
        emit_json(info)
        return
    where = f"cluster {info['cluster']}" if info["cluster"] else f"managed job {info['job_id']}"
    typer.echo(f"launched {info['name']} as {where}; run {info['run_id']} recorded; "
               f"follow with `cheaptune launch --status --job {info['job_id']}`")
    if info["unset_secrets"]:
        typer.echo(f"note: not set here, so not passed: {', '.join(info['unset_secrets'])}", err=True)
    for note in info.get("notes") or []:
        typer.echo(f"note: {note}", err=True)
    if info.get("billed_line"):
        typer.echo(f"warning: {info['billed_line']}", err=True)


def _print_status(result: object) -> None:
    if isinstance(result, dict):
        typer.echo(f"cancel requested for managed job {result['cancelled']}")
        return
    if not result:
        typer.echo("no managed jobs")
        return
    for r in result:  # type: ignore[union-attr]
        typer.echo(f"{r['job_id']}\t{r['name']}\t{r['status']}\t{r['infra'] or '-'}\trecoveries={r['recoveries']}")
