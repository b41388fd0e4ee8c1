"""Mute torch's fake-tensor logger while the simulation runs.

When a meta kernel refuses its inputs (e.g. `aten._grouped_mm`'s meta, a copy of the CUDA kernel's checks,
accepts only bf16, so a Mixtral step in fp16 fails), torch/_subclasses/fake_tensor.py logs the whole
traceback through `log.exception("failed while attempting to run meta for %s", func)` and then re-raises.
The simulator already turns that exception into one warning and the analytic estimate, so the ~22-line
traceback per attempt is noise to the user. Only that logger, only for the simulation, level restored after.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"  # logging.getLogger(__name__) in that module


@contextlib.contextmanager
def fake_tensor_log_muted() -> Iterator[None]:
    """Raise the fake-tensor logger above ERROR (log.exception's level) for the block, then put its level back."""
    logger = logging.getLogger(FAKE_TENSOR_LOGGER)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
