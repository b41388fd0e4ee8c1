"""Watchdogs: a GPU starved by its data pipeline, and a run that stopped making progress.

Starvation: GuardCallback times the gap between the end of one step's bookkeeping (on_step_end,
on_log, on_save, on_evaluate) and the next on_step_begin; in the HF Trainer that gap is the batch
fetch (get_batch_samples runs just before on_step_begin). A trainer with its own timings can call
`StarvationWatch.add(wait_s, compute_s)` directly instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

ADVICE = ("raise dataloader_num_workers, pre-tokenise the dataset (datasets.map with num_proc), "
          "enable packing, or put the data on local disk")


@dataclass
class StarvationWatch:
    """Accumulates data-wait against compute time; `add` returns a warning once, when the share passes the threshold."""

    threshold: float = 0.10
    min_steps: int = 5
    wait_s: float = 0.0
    compute_s: float = 0.0
    steps: int = 0
    warned: bool = False

    @property
    def wait_fraction(self) -> float:
        total = self.wait_s + self.compute_s
        return self.wait_s / total if total > 0 else 0.0

    def add(self, wait_s: float, compute_s: float) -> str | None:
        self.wait_s += max(wait_s, 0.0)
        self.compute_s += max(compute_s, 0.0)
        self.steps += 1
        if self.warned or self.steps < self.min_steps or self.wait_fraction <= self.threshold:
            return None
        self.warned = True
        return (f"training waits for data {self.wait_fraction:.0%} of the time (threshold {self.threshold:.0%}) "
                f"over {self.steps} steps; {ADVICE}")


class IdleWatchdog:
    """A daemon thread: when `progress()` has not been called for `idle_s`, calls `on_idle(idle_seconds)` once.

    After it fires, `on_hung` (if given) is called when another `idle_s` passes still without
    progress: the loop is stuck where no callback can stop it (a hung collective, a dead data
    worker), so the caller escalates (GuardCallback sends itself SIGTERM, which the trainer's
    preemption handler turns into a checkpoint and exit). `clock` and `wait` are injectable for tests.
    """

    def __init__(self, idle_s: float, on_idle: Callable[[float], None], on_hung: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, poll_s: float | None = None) -> None:
        self.idle_s, self.on_idle, self.on_hung, self.clock = idle_s, on_idle, on_hung, clock
        self.poll_s = poll_s if poll_s is not None else max(min(idle_s / 10, 30.0), 0.01)
        self._last = clock()
        self._fired_at: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="cheaptune-idle", daemon=True)

    def start(self) -> IdleWatchdog:
        self._thread.start()
        return self

    def progress(self) -> None:
        self._last = self.clock()
        self._fired_at = None

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> None:
        """One look at the clock (the thread calls this every poll_s; tests may call it directly)."""
        with self._lock:
            now = self.clock()
            if self._fired_at is None and now - self._last >= self.idle_s:
                self._fired_at = now
                self.on_idle(now - self._last)
            elif self._fired_at is not None and self.on_hung and now - self._fired_at >= self.idle_s:
                self._fired_at = float("inf")  # escalate once
                self.on_hung()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()
