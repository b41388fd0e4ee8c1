"""The exception hierarchy; each class carries the exit code the CLI maps it to (in one place)."""

from __future__ import annotations


class CheaptuneError(Exception):
    """Base class: a problem we can explain in one line."""

    exit_code = 1


class BadInput(CheaptuneError):
    """Invalid user input (config, dataset row, CLI argument, price file, model config)."""

    exit_code = 2


class Infeasible(CheaptuneError):
    """No option satisfies the constraints (nothing fits, over budget, past the deadline)."""

    exit_code = 3


class BudgetStop(CheaptuneError):
    """Training stopped at the budget or time cap after a checkpoint."""

    exit_code = 10


class OutOfMemory(CheaptuneError):
    """Out of GPU memory after every fallback that keeps the effective batch (gradient checkpointing,
    smaller micro-batches, the paged 8-bit optimizer when allowed); the last step is checkpointed, so the
    same command on a GPU with more memory resumes it. Its own code, so a launcher can tell "needs a
    larger GPU" from other failures (`cheaptune launch --watch` moves the run to the plan's next larger offer)."""

    exit_code = 11


class Preempted(CheaptuneError):
    """Stopped by SIGTERM/SIGINT or a spot notice after a checkpoint; resumable (128 + SIGTERM)."""

    exit_code = 143
