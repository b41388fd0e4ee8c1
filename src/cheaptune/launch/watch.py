"""`launch --watch`: follow a managed job to its end and fail over to a larger GPU when it runs out of memory.

A managed job's `job_recovery` covers preemptions (and exit 143); an out-of-memory exit (11) is a user-program
failure SkyPilot would at most restart on the same GPU. Here the launcher reads SkyPilot's queue until the job
ends and, on exit 11, submits the plan again on the next larger offer (`failover.next_offer`) with the same
checkpoint bucket, so `train --resume auto` continues from the last checkpoint and the spend ledger in the
bucket keeps the budget cap across the move. Each failover is one line on stderr and a `failover` event on the
run that ran out of memory; after `max_failovers`, or with no larger offer, it stops with exit 11.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from cheaptune.errors import BudgetStop, CheaptuneError, OutOfMemory
from cheaptune.launch import launcher
from cheaptune.launch.backend import Backend, LaunchResult
from cheaptune.launch.failover import OOM_EXIT, TERMINAL, exit_code, job_status, next_offer, on_offer, ran_on
from cheaptune.launch.options import LaunchOptions
from cheaptune.launch.task import bucket_of, select_offers, task_name
from cheaptune.plan.planfile import Offer, PlanFile

POLL_S = 30.0  # between `sky jobs queue` calls: a job's state changes over minutes, not seconds
MAX_FAILOVERS = 2


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_end(backend: Backend, job_id: int, poll_s: float, sleep: Callable[[float], None]) -> dict:
    """Poll SkyPilot's queue until the job is in a terminal status; the registry follows every poll."""
    while True:
        rows = backend.status(job_id)
        launcher.sync_status(rows)
        row = next((r for r in rows if r.get("job_id") == job_id), None)
        if row is None:
            raise CheaptuneError(f"managed job {job_id} is not in SkyPilot's queue; see `sky jobs queue`")
        if job_status(row) in TERMINAL:
            return row
        sleep(poll_s)


def launched_job(plan: PlanFile, opts: LaunchOptions, job_id: int) -> dict:
    """An earlier launch of this plan as managed job `job_id`, as `launcher.launch` returned it: so a watch
    that stopped (the laptop slept, the API server went away) can go on (`launch PLAN --watch --job N`)."""
    from cheaptune.runs.registry import Registry

    ref = launcher.remote_ref("job", LaunchResult(job_id=job_id))
    run = next((r for r in Registry().list_runs() if r.get("remote") == ref), None)
    return {"name": run["name"] if run else task_name(plan, opts), "job_id": job_id,
            "run_id": run["id"] if run else None}


def _record_failover(info: dict, failed: Offer, nxt: Offer, new: dict, bucket: str) -> dict:
    from cheaptune.runs.registry import Registry, RunHandle

    detail = {"from": launcher.describe(failed), "to": launcher.describe(nxt), "job_id": info["job_id"],
              "next_job_id": new["job_id"], "next_run_id": new["run_id"], "bucket": bucket}
    if info.get("run_id"):  # a job launched from another machine has no record here
        RunHandle(Registry(), info["run_id"], segment=-1).event("failover", detail)
    RunHandle(Registry(), new["run_id"], segment=-1).event("failover_from", {"run_id": info["run_id"], **detail})
    return detail


def watch(plan: PlanFile, opts: LaunchOptions, backend: Backend, launched: dict, *,
          max_failovers: int = MAX_FAILOVERS, poll_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
          echo: Callable[[str], None] = _stderr, out: str | Path | None = None,
          env: Mapping[str, str] | None = None) -> dict:
    """Follow `launched` (what `launcher.launch` returned) to the end; returns the last launch's info with
    `final` (SkyPilot's status) and `failovers`. Raises OutOfMemory (11) when memory runs out and no larger
    offer (or no failover) is left, BudgetStop (10) on a budget stop, CheaptuneError on other failures."""
    if opts.mode != "job":
        raise CheaptuneError("--watch follows managed jobs; launch without --cluster")
    poll_s = POLL_S if poll_s is None else poll_s
    opts = replace(opts, bucket=bucket_of(opts, launched["name"]))  # every resubmission resumes from this bucket
    info, running, failovers = launched, plan, []
    while True:
        try:
            row = wait_for_end(backend, info["job_id"], poll_s, sleep)
        except CheaptuneError as err:  # the job goes on without us: say how to watch it again
            raise type(err)(f"{err}; the job goes on: watch it again with `cheaptune launch PLAN --watch "
                            f"--job {info['job_id']}`") from None
        status, code = job_status(row), exit_code(row)
        if status == "SUCCEEDED":
            return {**info, "final": status, "failovers": failovers}
        if code == BudgetStop.exit_code:
            raise BudgetStop(f"managed job {info['job_id']} stopped at the budget cap after a checkpoint; "
                             f"raise --budget and launch again (it resumes from {opts.bucket})")
        if code != OOM_EXIT:
            raise CheaptuneError(f"managed job {info['job_id']} ended {status}"
                                 f"{f' (exit {code})' if code is not None else ''}; "
                                 f"see `sky jobs logs {info['job_id']}`")
        current = ran_on(row, select_offers(running, opts.margin).offers)
        nxt = next_offer(plan, current)
        if nxt is None or len(failovers) >= max_failovers:
            why = (f"the failover limit ({max_failovers}) is reached" if nxt is not None else
                   "the plan has no larger offer on which it fits within the budget")
            raise OutOfMemory(f"managed job {info['job_id']} ran out of memory on {launcher.describe(current)} "
                              f"after every fallback and {why}; re-plan with larger GPUs (`cheaptune plan ... "
                              f"--gpu NAME --save`) and launch it with --bucket {opts.bucket} to resume")
        echo(f"out of memory on {launcher.describe(current)} (job {info['job_id']}): failing over to "
             f"{launcher.describe(nxt)}, resuming from {opts.bucket}")
        running = on_offer(plan, nxt)
        new = launcher.launch(running, opts, backend, out, env)
        failovers.append(_record_failover(info, current, nxt, new, opts.bucket))
        info = new
