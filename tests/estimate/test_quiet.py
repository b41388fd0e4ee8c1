"""The simulation keeps torch's fake-tensor tracebacks off the user's terminal (issue 33), and only for its duration."""

from __future__ import annotations

import contextlib
import logging

import pytest

from cheaptune.estimate.memory import simulate as sim
from cheaptune.estimate.memory.quiet import FAKE_TENSOR_LOGGER, fake_tensor_log_muted
from tests.estimate.conftest import request


def tiny_mixtral():
    """A 2-layer, 4-expert Mixtral built locally (no hub): its experts run through aten._grouped_mm."""
    from transformers import MixtralConfig

    return MixtralConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=256, num_local_experts=4, num_experts_per_tok=2,
                         max_position_embeddings=512)


def emitted(capfd, caplog) -> str:
    """What reached the terminal or any logging handler (torch's own stderr handler, or pytest's capture)."""
    return capfd.readouterr().err + caplog.text


def test_failed_meta_kernel_prints_no_traceback(capfd, caplog, monkeypatch):
    """fp16 experts sent to torch's grouped_mm (dtype routing off): its meta kernel refuses them, torch logs
    log.exception, the simulator re-raises."""
    cfg = tiny_mixtral()
    req = request(cfg, method="lora", precision="fp16-mixed", micro_batch=1, seq_len=32)
    monkeypatch.setattr(sim, "grouped_mm_bf16_only", contextlib.nullcontext)
    before = logging.getLogger(FAKE_TENSOR_LOGGER).level
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RuntimeError, match="BF16"):
        sim.simulate(req, cfg)
    err = emitted(capfd, caplog)
    assert "Traceback" not in err and "failed while attempting to run meta" not in err
    assert logging.getLogger(FAKE_TENSOR_LOGGER).level == before  # restored after the exception too


def test_without_the_muter_the_traceback_shows(capfd, caplog, monkeypatch):
    """The same run with the muter replaced by a no-op does print torch's traceback: the test above is not vacuous."""
    cfg = tiny_mixtral()
    req = request(cfg, method="lora", precision="fp16-mixed", micro_batch=1, seq_len=32)
    monkeypatch.setattr(sim, "grouped_mm_bf16_only", contextlib.nullcontext)
    monkeypatch.setattr(sim, "fake_tensor_log_muted", contextlib.nullcontext)
    with pytest.raises(RuntimeError):
        sim.simulate(req, cfg)
    # the logged error (its traceback lines come with it where a handler formats exc_info; pytest's capture may not)
    assert "failed while attempting to run meta" in emitted(capfd, caplog)


def test_estimate_unchanged_by_the_muter(monkeypatch):
    """bf16 experts simulate; muting the logger changes no byte of the result."""
    cfg = tiny_mixtral()
    req = request(cfg, method="lora", precision="bf16-true", micro_batch=1, seq_len=32)
    muted = sim.simulate(req, cfg)
    monkeypatch.setattr(sim, "fake_tensor_log_muted", contextlib.nullcontext)
    plain = sim.simulate(req, cfg)
    assert muted.phase_peaks == plain.phase_peaks and muted.breakdown == plain.breakdown
    assert muted.phase_peaks["backward"] > 0


def test_level_restored_and_other_loggers_untouched():
    logger, other = logging.getLogger(FAKE_TENSOR_LOGGER), logging.getLogger("torch")
    level, other_level = logger.level, other.level
    logger.setLevel(logging.INFO)
    try:
        with fake_tensor_log_muted():
            assert not logger.isEnabledFor(logging.ERROR)
            assert other.level == other_level
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(level)
