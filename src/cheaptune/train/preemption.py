"""Preemption: SIGTERM/SIGINT or a spot notice -> checkpoint at the end of the current step, then exit 143.

Signal handlers only set a flag (no I/O in a handler); the callback turns the flag into a save and a
stop at the next step boundary, where the model, optimizer and data position are consistent.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from transformers import TrainerCallback

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class PreemptionFlag:
    """Set by a signal or a spot-notice poller; read by the callback between steps."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def _handler(self, signum: int, frame: Any) -> None:
        if self.is_set():
            # A second signal means "now": give up on the graceful save.
            raise KeyboardInterrupt
        self.set(signal.Signals(signum).name)

    def install(self) -> None:
        """Handlers for SIGTERM and SIGINT (main thread only, as Python requires)."""
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handler)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class PreemptionCallback(TrainerCallback):
    """At the first step end after the flag: save now (unless this step is already saved) and stop."""

    def __init__(self, flag: PreemptionFlag) -> None:
        self.flag = flag
        self.stopped_at: int | None = None
        self._last_saved_step = -1

    def on_save(self, args, state, control, **kwargs):
        self._last_saved_step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.flag.is_set():
            control.should_save = state.global_step != self._last_saved_step
            control.should_training_stop = True
            self.stopped_at = state.global_step
        return control
