"""Spot safety: SIGKILL at random steps and inside a save, SIGTERM -> 143; each resume ends bit-identical."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from cheaptune.train import checkpoints as ck
from cheaptune.train import resume
from tests.train.conftest import STEPS, logged_step, sigterm_at_step, start, summary, train_args

ADAPTER = "adapter_model.safetensors"


def _main(args: list[str]) -> int:
    from cheaptune.cli.main import main

    try:
        main(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


@pytest.fixture(scope="module")
def reference(tiny_model_dir, chat_file, tmp_path_factory) -> Path:
    """An uninterrupted run: the ground truth every interrupted run must reproduce bit for bit."""
    out = tmp_path_factory.mktemp("reference") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHEAPTUNE_HOME", str(out.parent / "home"))
        assert _main(train_args(tiny_model_dir, chat_file, out)) == 0
    return out


def _losses(out: Path) -> list[tuple[int, float]]:
    return [(h["step"], h["loss"]) for h in summary(out)["loss_history"]]


def _assert_same_as_reference(out: Path, reference: Path) -> None:
    assert _losses(out) == _losses(reference)
    assert len(_losses(out)) == STEPS
    assert (out / ADAPTER).read_bytes() == (reference / ADAPTER).read_bytes()


def _wait(proc, timeout: float = 240) -> int:
    return proc.wait(timeout=timeout)


def test_sigkill_at_random_steps_resumes_bit_identical(tiny_model_dir, chat_file, reference, tmp_path):
    rng = random.Random(int(time.time()))
    out, log = tmp_path / "out", tmp_path / "log.txt"
    args = train_args(tiny_model_dir, chat_file, out)

    # Kill 1: SIGKILL from outside once the run has logged a random step (it dies wherever it is then).
    first = rng.randint(3, 7)
    proc = start(args, log)
    deadline = time.monotonic() + 240
    while logged_step(out) < first and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert _wait(proc) == -signal.SIGKILL, log.read_text()[-2000:]
    died_at = logged_step(out)
    assert died_at < STEPS, "the run finished before the kill; nothing was tested"

    # Kill 2: the resumed run SIGKILLs itself at a later random step (test hook in the trainer).
    second = rng.randint(min(died_at + 2, STEPS - 2), STEPS - 2)
    proc = start(args, log, CHEAPTUNE_TEST_KILL_AT_STEP=str(second))
    assert _wait(proc) == -signal.SIGKILL, log.read_text()[-2000:]
    assert "resuming from" in log.read_text()

    # Final resume: finishes; loss sequence and adapter bytes equal the uninterrupted run's.
    proc = start(args, log)
    assert _wait(proc) == 0, log.read_text()[-2000:]
    assert log.read_text().count("resuming from") == 2
    _assert_same_as_reference(out, reference)
    _assert_readable_output(log.read_text())


def _assert_readable_output(text: str) -> None:
    """What a user reads: no transformers FutureWarnings, the last step once, a rounded loss and the run id."""
    assert "FutureWarning" not in text
    assert text.count(f"step {STEPS}/{STEPS} ") == 1
    (done,) = [ln for ln in text.splitlines() if ln.startswith("done:")]
    loss = done.split("final loss ")[1].split()[0]
    assert len(loss.replace(".", "").lstrip("0")) <= 4 and float(loss) > 0, done
    assert "(run " in done and "cheaptune report " in done
    said = {ln.split()[1].rstrip(":") for ln in text.splitlines() if ln.startswith("run ") and "cheaptune report" in ln}
    assert len(said) == 1 and f"(run {said.pop()}:" in done  # each segment said its run id first, the same one


def test_kill_during_checkpoint_write_keeps_previous_usable(tiny_model_dir, chat_file, reference, tmp_path, capsys):
    out, log = tmp_path / "out", tmp_path / "log.txt"
    args = train_args(tiny_model_dir, chat_file, out)
    proc = start(args, log, CHEAPTUNE_TEST_SAVE_HOOK="6:abort")  # SIGKILL after staging checkpoint-6
    assert _wait(proc) == -signal.SIGKILL, log.read_text()[-2000:]

    assert (out / ck.STAGING / "checkpoint-6").is_dir(), "the kill should land in the staging phase"
    assert not (out / "checkpoint-6").exists()
    assert ck.verify(out / "checkpoint-4") is None
    # Also damage checkpoint-4: resume must skip it with a warning and take checkpoint-2.
    (out / "checkpoint-4" / ADAPTER).write_bytes(b"garbage")
    assert resume.choose("auto", out) == out / "checkpoint-2"  # what --resume auto will take
    tokens_before = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["num_input_tokens_seen"]

    assert _main(args) == 0
    printed = capsys.readouterr().out
    assert "skipping" in printed and "checkpoint-4" in printed
    assert "resuming from" in printed and "checkpoint-2" in printed
    assert not (out / ck.STAGING).exists()
    _assert_same_as_reference(out, reference)
    _assert_resumed_speed(out, tokens_before)


def _assert_resumed_speed(out: Path, tokens_before: int) -> None:
    """The speed of a resumed run counts only this segment's tokens, though checkpoint rotation deleted the
    one it resumed from (it read 0 tokens there, so all tokens over this segment's seconds: ~2x); the
    registry's elapsed_s covers every segment, as its tokens do, so runs/ui/calibrate read one run."""
    from cheaptune.runs.registry import Registry

    s = summary(out)
    assert not (out / "checkpoint-2").exists()  # rotated away while training
    assert 0 < tokens_before < s["tokens"]
    assert s["tokens_per_s"] == pytest.approx((s["tokens"] - tokens_before) / s["seconds_this_segment"], rel=1e-3)
    run = Registry().list_runs()[0]
    assert run["tokens"] == s["tokens"] and run["tokens_per_s"] == s["tokens_per_s"]
    assert run["elapsed_s"] > s["seconds_this_segment"]  # the killed segment's time is in it


def test_sigterm_saves_exits_143_then_resumes_identically(tiny_model_dir, chat_file, reference, tmp_path, run_cli):
    out = tmp_path / "out"
    args = train_args(tiny_model_dir, chat_file, out, "--save-steps", "100")  # no periodic saves
    sigterm_at_step(out, 5)
    code, _, err = run_cli(*args)
    assert code == 143, err
    assert "SIGTERM: saved" in err and " s; " in err  # how long the save took
    saved = ck.list_checkpoints(out)
    assert len(saved) == 1 and ck.verify(saved[0]) is None
    stopped = ck.step_of(saved[0])
    assert 5 <= stopped < STEPS

    code, out_text, err = run_cli(*args)
    assert code == 0, err
    _assert_same_as_reference(out, reference)
