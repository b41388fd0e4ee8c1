"""Build a SkyPilot task (the dict of its YAML) from a plan: resources, mounts, secrets, setup and run.

Only names of secrets go in the task; their values are handed to SkyPilot at launch from our
environment. The checkpoint bucket is mounted at the folder `cheaptune train --checkpoint-dir` writes
to, so a managed job relaunched after a preemption resumes from the last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cheaptune.errors import BadInput, Infeasible, Preempted
from cheaptune.launch.names import require_cloud, sky_cloud, sky_gpu
from cheaptune.launch.options import LaunchOptions
from cheaptune.launch.stage import CONSTRAINTS, Staged, disk_size_gb
from cheaptune.plan.planfile import Offer, PlanFile, is_cpu_board

# Headroom over the priciest chosen offer for `max_hourly_cost`: SkyPilot's catalog price for the same
# machine may differ slightly from ours; the cap is there to stop a much pricier instance, not to fail.
HOURLY_SLACK = 0.10
# The object store of each cloud that has one (sky.data.storage.StoreType.from_cloud, skypilot 0.14.1).
NATIVE_STORES = {"aws": "s3", "gcp": "gcs", "azure": "azure", "oci": "oci", "ibm": "ibm", "nebius": "nebius"}
RECOVERY_STRATEGY = "EAGER_NEXT_REGION"  # SkyPilot 0.14's default; named so the YAML says what it does
QLORA_METHODS = ("qlora",)


@dataclass
class Selection:
    """The offers put in the task (best first) and why others were left out."""

    offers: list[Offer]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the offers were put in SkyPilot's terms


def _total(offer: Offer, plan: PlanFile) -> float:
    return offer.total_cost if offer.total_cost is not None else plan.prediction.cost.total


def select_offers(plan: PlanFile, margin: float) -> Selection:
    """The plan's offer plus alternatives within `margin` of its total cost (and within budget)."""
    if is_cpu_board(plan.offer.gpu):  # demo.cpuplan's plan for the machine it was made on
        raise BadInput(f"the plan is for the CPU it was made on ({plan.offer.provider}, "
                       f"${plan.offer.price_per_hour:g}/h), not a cloud GPU: train it there with `cheaptune train "
                       "--plan PLAN`, or make a cloud plan with `cheaptune plan ... --save PLAN`")
    require_cloud(plan.offer.provider)
    if plan.offer.price_per_hour <= 0:
        raise BadInput(f"the plan's offer {plan.offer.provider} {plan.offer.gpu} has no price (${plan.offer.price_per_hour:g}/h), "
                       "so the budget meter could not stop it; re-plan, or set offer.price_per_hour in the plan file")
    best = _total(plan.offer, plan)
    if plan.budget_usd is not None and best > plan.budget_usd:
        raise Infeasible(
            f"the plan predicts ${best:.2f}, over its budget ${plan.budget_usd:.2f}; re-plan with a larger "
            "--budget or a cheaper option"
        )
    chosen, skipped = [plan.offer], []
    seen = {_key(plan.offer)}
    for alt in plan.alternatives:
        cost = _total(alt, plan)
        if _key(alt) in seen:
            continue
        if alt.num_nodes != plan.offer.num_nodes:  # one task has one num_nodes
            skipped.append(f"{alt.provider} {alt.gpu}: {alt.num_nodes} nodes, the plan's offer has {plan.offer.num_nodes}")
            continue
        if sky_cloud(alt.provider) is None:
            skipped.append(f"{alt.provider} {alt.gpu}: not a SkyPilot cloud")
        elif alt.price_per_hour <= 0:
            skipped.append(f"{alt.provider} {alt.gpu}: no price, so the budget meter could not stop it")
        elif cost > best * (1 + margin):
            skipped.append(f"{alt.provider} {alt.gpu}: ${cost:.2f} is over {margin:.0%} above ${best:.2f}")
        elif plan.budget_usd is not None and cost > plan.budget_usd:
            skipped.append(f"{alt.provider} {alt.gpu}: ${cost:.2f} is over the budget")
        else:
            chosen.append(alt)
            seen.add(_key(alt))
    return Selection(chosen, skipped)


def _key(o: Offer) -> tuple:
    return (sky_cloud(o.provider) or o.provider, o.region, o.gpu, o.gpu_count, o.num_nodes, o.spot)


def resource_entry(offer: Offer, catalog: Path | None = None) -> tuple[dict, str | None]:
    """One offer in SkyPilot's spelling (infra cloud[/region], accelerators NAME:COUNT, use_spot) and a
    note when its region had to be respelled or widened (launch.regions)."""
    from cheaptune.launch.regions import sky_region

    cloud = require_cloud(offer.provider)
    region = sky_region(offer.provider, cloud, offer.region, catalog)
    infra = cloud if region.sky is None else f"{cloud}/{region.sky}"
    entry = {"infra": infra, "accelerators": f"{sky_gpu(offer.gpu, cloud)}:{offer.gpu_count}", "use_spot": offer.spot}
    return entry, region.note


def resource_entries(offers: list[Offer], catalog: Path | None) -> tuple[list[dict], list[str]]:
    """The task's `any_of`: every chosen offer, then, for a marketplace location, the same GPU anywhere on
    that marketplace (a host's listing may be gone by launch; the price cap still holds)."""
    from cheaptune.launch.names import is_marketplace

    entries, notes = [], []
    for o in offers:
        entry, note = resource_entry(o, catalog)
        entries.append(entry)
        notes += [note] if note else []
    for entry in list(entries):
        cloud = entry["infra"].split("/")[0]
        anywhere = {**entry, "infra": cloud}
        if is_marketplace(cloud) and anywhere not in entries:
            entries.append(anywhere)
            notes.append(f"{entry['infra']} {entry['accelerators']}: also any {cloud} location, if that host is gone")
    return entries, notes


def _resources(plan: PlanFile, sel: Selection, staged: Staged, opts: LaunchOptions) -> dict:
    entries, sel.notes = resource_entries(sel.offers, opts.sky_catalog)
    res: dict = dict(entries[0]) if len(entries) == 1 else {"any_of": entries}
    res["disk_size"] = opts.disk_gb or disk_size_gb(plan, staged)
    cap = opts.max_hourly_cost
    if cap is None and plan.budget_usd is not None:
        top = max(sel.offers, key=lambda o: o.price_per_hour)
        cap = round(top.price_per_hour * (1 + HOURLY_SLACK), 4)
        if top.price_basis != "quoted":
            sel.notes.append(f"max_hourly_cost ${cap:g} is {1 + HOURLY_SLACK:g}x a {top.price_basis} price "
                             f"({top.provider} {top.gpu}, not quoted by the provider): SkyPilot may find nothing "
                             "under it; pass --max-hourly-cost to set it, and the billed rate is checked at launch")
    if cap is not None:
        res["max_hourly_cost"] = cap
    if opts.mode == "job":
        # A run stopped by a spot notice exits 143 (Preempted) after checkpointing: recover it like a
        # preemption. A budget stop (10) or a crash is not retried beyond max_restarts_on_errors.
        res["job_recovery"] = {
            "strategy": RECOVERY_STRATEGY,
            "max_restarts_on_errors": opts.max_restarts_on_errors,
            "recover_on_exit_codes": [Preempted.exit_code],
        }
    else:
        res["autostop"] = {"idle_minutes": opts.idle_minutes, "down": True}
    return res


def bucket_of(opts: LaunchOptions, name: str) -> str:
    """The checkpoint bucket: --bucket, else one named after the task (so a relaunch finds its checkpoints)."""
    return opts.bucket or f"cheaptune-ckpt-{name}"


def bucket_store(opts: LaunchOptions, offers: list[Offer]) -> tuple[str | None, str | None]:
    """The store a named bucket is created in, and a note when none could be chosen: --store, else the
    object store of the cloud every offer runs on (SkyPilot's StoreType.from_cloud). A URI names its own."""
    if opts.bucket and "://" in opts.bucket:
        return None, None
    if opts.store:
        return opts.store, None
    clouds = {require_cloud(o.provider) for o in offers}
    native = {NATIVE_STORES.get(c) for c in clouds}
    if len(native) == 1 and None not in native:
        return native.pop(), None
    return None, (f"the checkpoint bucket needs an object store and {'/'.join(sorted(clouds))} offers none of "
                  f"one kind: SkyPilot creates it on an enabled cloud with storage; pass --store "
                  f"({', '.join(NATIVE_STORES.values())}, r2, ...) to choose")


def _bucket_mount(opts: LaunchOptions, name: str, store: str | None) -> dict:
    bucket = bucket_of(opts, name)
    key = "source" if "://" in bucket else "name"
    return {key: bucket, "mode": opts.bucket_mode, "persistent": True, **({"store": store} if store else {})}


def extras(plan: PlanFile) -> tuple[str, ...]:
    """The cheaptune extras the run needs on the machine, exactly those its settings use: bitsandbytes for
    4-bit bases and 8-bit optimizers, and the speed options' packages (train.speedups.PACKAGES, attn flash)."""
    from cheaptune.train.speedups import PACKAGES

    t = plan.train
    out = ["qlora"] if t.method in QLORA_METHODS or t.quant or "8bit" in t.optimizer else []
    out += [PACKAGES[name][2] for name in ("liger_kernel", "torch_compile") if getattr(t, name)]
    return tuple(out + (["flash"] if t.attn == "flash" else []))


def _install_lines(plan: PlanFile, opts: LaunchOptions, uploads: dict[str, str]) -> list[str]:
    """Into a virtual environment (Debian/Ubuntu images refuse a system `pip install`, PEP 668), with the
    tested lock as constraints (launch.lock), so the machine runs the versions the tests ran."""
    from cheaptune.launch.package import package

    pkg = package(extras(plan), opts.install)
    spec = pkg.spec
    if pkg.local is not None:
        uploads[f"{opts.pkg_dir}/{pkg.local.name}"] = str(pkg.local)
        spec = f"{opts.pkg_dir}/{pkg.spec}"
    index = f"--index-url {shlex.quote(opts.index_url)} " if opts.index_url else ""
    venv = shlex.quote(opts.venv_dir)
    return [
        "set -euo pipefail",
        # ensurepip is a separate package on Debian/Ubuntu (python3-venv)
        f"python3 -m venv {venv} || {{ sudo apt-get update -q && sudo apt-get install -y -q python3-venv "
        f"&& python3 -m venv {venv}; }}",
        # On Linux x86_64 the default torch wheel is the CUDA build; on a GPU machine, fail here (before
        # the run is paid for) if torch cannot see the GPU.
        f"{venv}/bin/python -m pip install {index}-c {shlex.quote(f'{opts.job_dir}/{CONSTRAINTS}')} {shlex.quote(spec)}",
        "if command -v nvidia-smi >/dev/null 2>&1; then "
        f"{venv}/bin/python -c 'import torch; assert torch.cuda.is_available(), \"torch has no CUDA on this machine\"'; fi",
    ]


# Which cloud SkyPilot picked is only known on the machine: read it there, to price the meter (the
# highest price among that cloud's offers, so the budget errs safe) and to poll that cloud's spot notice.
_PICK_CLOUD = (
    'CLOUD=$(python3 -c \'import json, os; '
    'print(json.loads(os.environ.get("SKYPILOT_CLUSTER_INFO") or "{}").get("cloud", "").lower())\')'
)
# The billed rate, when launch learned it from SkyPilot (a cluster: launch.launcher), wins over the plan's.
BILLED_ENV = "CHEAPTUNE_BILLED_PRICE"
_PICK_PRICE = (
    f'PRICE=${{{BILLED_ENV}:-$(python3 -c \'import json, os, sys; p = json.loads(os.environ["CHEAPTUNE_OFFER_PRICES"]); '
    'print(p.get(sys.argv[1], max(p.values())))\' "$CLOUD")}'
)
_PICK_NOTICE = 'case "$CLOUD" in aws|gcp|azure) NOTICE="$CLOUD" ;; *) NOTICE=none ;; esac'
NOTICE_CLOUDS = ("aws", "gcp", "azure")


def offer_prices(offers: list[Offer]) -> dict[str, float]:
    """Per SkyPilot cloud, the highest hourly price of the whole job (instance price x nodes) among the
    chosen offers: the meter on node 0 counts every node's GPUs."""
    prices: dict[str, float] = {}
    for o in offers:
        cloud = require_cloud(o.provider)
        prices[cloud] = max(prices.get(cloud, 0.0), o.price_per_hour * o.num_nodes)
    return prices


# torchrun's static rendezvous from what SkyPilot exports on every node; node 0 (the first IP) hosts it.
# Used for every multi-GPU task (one node too), so single- and multi-node runs take the same path.
TORCHRUN = (
    "{venv}/bin/python -m torch.distributed.run --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK "
    '--master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1) --master_port=29500 '
    "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE -m cheaptune"
)


def with_run_budget(plan: PlanFile, opts: LaunchOptions) -> PlanFile:
    """The plan holding the cap the machine's train runs under, by train's rule (train.planmerge.run_budget):
    launch --budget wins, else the lower of the plan's budget and the --config file's budget_usd. launcher.prepare
    applies it first, so the offers are held to that cap before anything is rented (train there would refuse a
    plan predicted over it, exit 3, after the boot was paid for), the staged plan says it and the task passes it
    as `--budget`. A config budget_usd that is no positive number is left to check_run to refuse in one line."""
    from cheaptune.train.config import read_yaml
    from cheaptune.train.planmerge import is_amount, run_budget

    own = read_yaml(opts.config).get("budget_usd") if opts.config is not None else None
    cap = run_budget(plan.budget_usd, own, opts.budget)
    if not is_amount(cap) or cap <= 0:
        cap = opts.budget if opts.budget is not None else plan.budget_usd
    return plan if cap == plan.budget_usd else plan.model_copy(update={"budget_usd": float(cap)})


def _run_lines(plan: PlanFile, opts: LaunchOptions, offers: list[Offer]) -> list[str]:
    cmd = ["train", f"{opts.job_dir}/config.yaml", "--plan", f"{opts.job_dir}/plan.yaml", "--resume", "auto",
           "--checkpoint-dir", opts.checkpoint_dir]
    if plan.budget_usd is not None:  # the run's cap (with_run_budget): wins over the config's own in train
        cmd += ["--budget", f"{plan.budget_usd:g}"]
    args = " ".join(shlex.quote(c) for c in cmd) + ' --price-per-hour "$PRICE"'
    lines = ["set -euo pipefail", _PICK_CLOUD, _PICK_PRICE]
    if any(o.spot for o in offers):
        lines.append(_PICK_NOTICE)
        args += ' --spot-notice "$NOTICE"'
    # exec: the trainer replaces the shell, so a preemption's SIGTERM reaches it and its exit code
    # (143 preempted, 10 budget) is the job's, which is what job_recovery reads.
    venv = shlex.quote(opts.venv_dir)
    if any(o.gpu_count > 1 or o.num_nodes > 1 for o in offers):
        lines.append(f"exec {TORCHRUN.format(venv=venv)} {args}")
    else:
        lines.append(f"exec {venv}/bin/cheaptune {args}")
    return lines


def build_task(plan: PlanFile, staged: Staged, staging_dir: str, opts: LaunchOptions) -> tuple[dict, Selection]:
    """The task dict (dump it as YAML) and the offer selection it was built from."""
    sel = select_offers(plan, opts.margin)
    name = task_name(plan, opts)
    uploads = dict(staged.uploads)
    setup = _install_lines(plan, opts, uploads)
    store, note = bucket_store(opts, sel.offers)
    file_mounts: dict = {opts.job_dir: staging_dir, **uploads, opts.checkpoint_dir: _bucket_mount(opts, name, store)}
    task = {
        "name": name,
        "resources": _resources(plan, sel, staged, opts),
        "envs": {
            "CHEAPTUNE_RUN_NAME": name,
            "CHEAPTUNE_OFFER_PRICES": json.dumps(offer_prices(sel.offers), sort_keys=True),
            "PYTHONUNBUFFERED": "1",
        },
        "secrets": {s: None for s in opts.secrets},
        "file_mounts": file_mounts,
        "setup": "\n".join(setup) + "\n",
        "run": "\n".join(_run_lines(plan, opts, sel.offers)) + "\n",
    }
    sel.notes += [note] if note else []
    if not task["secrets"]:
        del task["secrets"]
    if plan.offer.num_nodes > 1:
        task["num_nodes"] = plan.offer.num_nodes
    return task, sel


def task_name(plan: PlanFile, opts: LaunchOptions) -> str:
    """--name, else model + method + a hash of the plan, in lowercase letters, digits and '-' (bucket rules).

    The same plan gets the same name and so the same checkpoint bucket: launching it again resumes.
    """
    if opts.name:
        return opts.name
    base = plan.model.rstrip("/").split("/")[-1].lower()
    slug = "".join(c if c.isalnum() else "-" for c in base).strip("-")[:30] or "run"
    digest = hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:6]
    return f"ct-{slug}-{plan.train.method}-{digest}".replace("_", "-")
