"""Kill hooks for the resume tests, injected into the test's own subprocesses (never product code).

The tests start `python -m cheaptune train ...` (and torchrun's children) with this folder on PYTHONPATH,
so Python imports this module at start-up. It reads two variables that only the tests set:
- CHEAPTUNE_TEST_KILL_AT_STEP=N: SIGKILL at the end of optimizer step N (a callback added to the run);
- CHEAPTUNE_TEST_SAVE_HOOK=N:abort: SIGKILL inside the save of checkpoint-N, after its files are staged
  and before it is published (the rename that makes it visible).
"""

from __future__ import annotations

import os
import signal

KILL_AT = os.environ.get("CHEAPTUNE_TEST_KILL_AT_STEP", "")
SAVE_HOOK = os.environ.get("CHEAPTUNE_TEST_SAVE_HOOK", "")


def _install_kill_at_step(step: int) -> None:
    from transformers import TrainerCallback

    from cheaptune.train import run

    class KillAtStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                os.kill(os.getpid(), signal.SIGKILL)

    original = run.train

    def train(cfg, force=False, callbacks=(), **kwargs):  # kwargs: started_at, the meter's start
        return original(cfg, force, (*callbacks, KillAtStep()), **kwargs)

    run.train = train


def _install_abort_in_save(step: int) -> None:
    from cheaptune.train import checkpoints

    original = checkpoints.publish

    def publish(staged, root, *args, **kwargs):
        if staged.name == f"checkpoint-{step}":
            os.kill(os.getpid(), signal.SIGKILL)
        return original(staged, root, *args, **kwargs)

    checkpoints.publish = publish


if KILL_AT.isdigit():
    _install_kill_at_step(int(KILL_AT))
at, _, action = SAVE_HOOK.partition(":")
if at.isdigit() and action == "abort":
    _install_abort_in_save(int(at))
