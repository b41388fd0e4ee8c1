"""Spot safety for DPO as for SFT: SIGKILL mid-run and SIGTERM (exit 143) both resume to the same adapter bytes
and loss sequence as an uninterrupted run."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.train.conftest import sigterm_at_step, start, summary, write_jsonl
from tests.train.test_preference import pair_rows

ADAPTER = "adapter_model.safetensors"
STEPS = 8


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "pairs.jsonl", pair_rows(10))


def _args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--objective", "dpo",
            "--max-steps", str(STEPS), "--save-steps", "2", "--seq-len", "64", "--micro-batch", "1",
            "--grad-accum", "2", "--device", "cpu", "--probe-steps", "0", *extra]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, pairs, tmp_path_factory) -> Path:
    from cheaptune.cli.main import main

    out = tmp_path_factory.mktemp("dpo_reference") / "out"
    with pytest.raises(SystemExit) as done:
        main([*_args(tiny_model_dir, pairs, out), "--json"])
    assert done.value.code in (0, None)
    return out


def _same_as(out: Path, reference: Path) -> None:
    losses = [(h["step"], h["loss"]) for h in summary(out)["loss_history"]]
    assert losses == [(h["step"], h["loss"]) for h in summary(reference)["loss_history"]] and len(losses) == STEPS
    assert (out / ADAPTER).read_bytes() == (reference / ADAPTER).read_bytes()


def test_dpo_sigkill_then_resume_is_bit_identical(tiny_model_dir, pairs, reference, tmp_path, run_cli):
    out, log = tmp_path / "out", tmp_path / "log.txt"
    proc = start(_args(tiny_model_dir, pairs, out), log, CHEAPTUNE_TEST_KILL_AT_STEP="5")
    assert proc.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-2000:]
    assert (out / "checkpoint-4").is_dir() and not (out / ADAPTER).exists()
    code, printed, err = run_cli(*_args(tiny_model_dir, pairs, out))
    assert code == 0, err
    assert "resuming from" in printed and "checkpoint-4" in printed
    _same_as(out, reference)


def test_dpo_sigterm_exits_143_then_resumes_identically(tiny_model_dir, pairs, reference, tmp_path, run_cli):
    out = tmp_path / "out"
    args = _args(tiny_model_dir, pairs, out, "--save-steps", "100")
    sigterm_at_step(out, 3)
    code, _, err = run_cli(*args)
    assert code == 143 and "SIGTERM: saved" in err, err
    code, _, err = run_cli(*args)
    assert code == 0, err
    _same_as(out, reference)
