"""Out of memory on the rented GPU -> the next, larger offer of the plan.

`cheaptune train` exits 11 (`errors.OutOfMemory`) when a step runs out of GPU memory after every fallback
that keeps the effective batch, with its last step checkpointed in the bucket. SkyPilot's `job_recovery`
relaunches the same resources after a preemption and does not move a failed user program to another GPU,
so the failover is decided where launch watches the job (`launch.watch`): these are its pure parts, which
exit a job ended with (SkyPilot's own record) and which offer comes next.
"""

from __future__ import annotations

import re

from cheaptune.errors import OutOfMemory
from cheaptune.plan.planfile import Offer, PlanFile

OOM_EXIT = OutOfMemory.exit_code
# SkyPilot 0.14's jobs controller writes the user program's exit into the record's failure_reason:
# "Job exited with exit code 11 (user program failure). ..." (sky/jobs/controller.py).
_EXIT_CODE = re.compile(r"exit codes? \[?(\d+)")
# The managed-job statuses a job does not leave (sky.jobs.ManagedJobStatus.terminal_statuses()).
TERMINAL = frozenset({"SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP", "FAILED_PRECHECKS",
                      "FAILED_NO_RESOURCE", "FAILED_CONTROLLER"})


def job_status(row: dict) -> str:
    """A queue row's status in SkyPilot's spelling ('FAILED'), whatever form the client returned."""
    return str(row.get("status") or "").upper().removeprefix("MANAGEDJOBSTATUS.")


def exit_code(row: dict) -> int | None:
    """The exit code SkyPilot recorded for a failed job; None when it gave none."""
    match = _EXIT_CODE.search(str(row.get("failure") or ""))
    return int(match.group(1)) if match else None


def ran_on(row: dict, offers: list[Offer]) -> Offer:
    """Which of the task's offers the job ran on, from the accelerator in SkyPilot's resources text
    (e.g. "1x[A100-80GB:1]"); unknown -> the one with the most memory, so no GPU that may have run out of
    memory is tried again."""
    from cheaptune.launch.names import sky_cloud, sky_gpu

    text = str(row.get("resources") or "")
    named = [o for o in offers
             if re.search(rf"(?<![\w-]){re.escape(sky_gpu(o.gpu, sky_cloud(o.provider) or ''))}(?![\w-])", text)]
    return max(named or offers, key=_memory)


def misfit(plan: PlanFile, offer: Offer) -> str | None:
    """Why the plan's method cannot run on `offer`'s GPU (memory, bf16, 4-bit kernels); None when it fits."""
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.errors import BadInput

    try:
        gpu = resolve_gpu(offer.gpu)
    except BadInput:
        return f"{offer.gpu} is not in the GPU catalog"
    if plan.prediction.peak_vram_bytes > gpu.memory_bytes:
        return f"the planned peak does not fit {gpu.name}"
    if plan.train.precision.startswith("bf16") and not gpu.bf16:
        return f"{gpu.name} has no bf16"
    if plan.train.method == "qlora" and not gpu.bnb_4bit:
        return f"{gpu.name} has no 4-bit kernels"
    return None


def _memory(offer: Offer) -> int:
    """GPU memory in whole GiB, as `gpus` and `plan` show it: a 23.99 GiB board is no larger than a 24 GiB one."""
    from cheaptune.catalog.gpus import resolve_gpu

    return round(resolve_gpu(offer.gpu).memory_bytes / 2**30)


def _total(plan: PlanFile, offer: Offer) -> float:
    return offer.total_cost if offer.total_cost is not None else plan.prediction.cost.total


def next_offer(plan: PlanFile, failed: Offer) -> Offer | None:
    """The cheapest offer of the plan (its own or an alternative) with more memory per GPU than `failed`,
    the same GPUs per node and nodes, within the budget, on which the method fits; None when there is none."""
    floor = _memory(failed)
    larger = [
        o for o in (plan.offer, *plan.alternatives)
        if (o.gpu_count, o.num_nodes) == (failed.gpu_count, failed.num_nodes) and misfit(plan, o) is None
        and _memory(o) > floor and (plan.budget_usd is None or _total(plan, o) <= plan.budget_usd)
    ]
    return min(larger, key=lambda o: (_total(plan, o), o.price_per_hour), default=None)


def on_offer(plan: PlanFile, offer: Offer) -> PlanFile:
    """The plan as it runs after a failover: that offer alone (no smaller alternative to fall back to)."""
    return plan.model_copy(update={"offer": offer, "alternatives": []}, deep=True)
