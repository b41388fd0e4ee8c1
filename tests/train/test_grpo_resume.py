"""Spot safety for GRPO as for SFT: SIGKILL mid-run and SIGTERM (exit 143) both resume to the same rollout rewards,
losses and adapter bytes as an uninterrupted run (the sampling RNG and the prompt order restored)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.train.conftest import sigterm_at_step, start
from tests.train.test_grpo import ADAPTER, grpo_args, logged

STEPS = 6


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompts_file, lengths_reward, tmp_path_factory) -> Path:
    from cheaptune.cli.main import main

    out = tmp_path_factory.mktemp("grpo_reference") / "out"
    with pytest.raises(SystemExit) as done:
        main([*_args(tiny_model_dir, prompts_file, lengths_reward, out), "--json"])
    assert done.value.code in (0, None)
    return out


def _args(model: Path, data: Path, reward: Path, out: Path, *extra: str) -> list[str]:
    return [*grpo_args(model, data, out, STEPS, "--reward", str(reward), "--save-steps", "2"), *extra]


def _same_as(out: Path, reference: Path) -> None:
    keys = ("reward", "reward_std", "loss", "grad_norm", "completions/mean_length")
    got, want = logged(out), logged(reference)
    assert sorted(got) == list(range(1, STEPS + 1))
    assert {s: [r[k] for k in keys] for s, r in got.items()} == {s: [r[k] for k in keys] for s, r in want.items()}
    assert len({r["reward"] for r in want.values()}) > 1  # the rollouts differ step to step: the check has teeth
    assert (out / ADAPTER).read_bytes() == (reference / ADAPTER).read_bytes()


def test_grpo_sigkill_then_resume_is_bit_identical(tiny_model_dir, prompts_file, lengths_reward, reference,
                                                   tmp_path, run_cli):
    out, log = tmp_path / "out", tmp_path / "log.txt"
    args = _args(tiny_model_dir, prompts_file, lengths_reward, out)
    proc = start(args, log, CHEAPTUNE_TEST_KILL_AT_STEP="3")
    assert proc.wait(timeout=300) == -signal.SIGKILL, log.read_text()[-2000:]
    assert (out / "checkpoint-2").is_dir() and not (out / ADAPTER).exists()
    code, printed, err = run_cli(*args)
    assert code == 0, err
    assert "resuming from" in printed and "checkpoint-2" in printed
    _same_as(out, reference)


def test_grpo_sigterm_exits_143_then_resumes_identically(tiny_model_dir, prompts_file, lengths_reward, reference,
                                                         tmp_path, run_cli):
    out = tmp_path / "out"
    args = _args(tiny_model_dir, prompts_file, lengths_reward, out, "--save-steps", "100")
    sigterm_at_step(out, 3)
    code, _, err = run_cli(*args)
    assert code == 143 and "SIGTERM: saved" in err, err
    code, _, err = run_cli(*args)
    assert code == 0, err
    _same_as(out, reference)
