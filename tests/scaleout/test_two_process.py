"""`cheaptune train --gpu-count 2 --device cpu` relaunches itself as two processes (torchrun, gloo) that train
LoRA on the tiny model: checkpoint, get SIGKILLed, resume with --resume auto, and end bit-identical to an
uninterrupted two-process run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cheaptune.train import checkpoints as ck
from cheaptune.train import resume
from cheaptune.train.distributed import sharded_checkpoint_problem
from tests.train.conftest import child_env

STEPS = 6


def _rows(n: int) -> str:
    return "".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                            {"role": "assistant", "content": f"The answer is {2 * i}."}]}) + "\n"
                   for i in range(n))


def _torchrun(model: Path, data: Path, out: Path, log: Path, **hooks: str) -> int:
    args = [sys.executable, "-m", "cheaptune", "train", "--gpu-count", "2", "--sharding", "ddp", "--model", str(model), "--data", str(data), "-o", str(out), "--method", "lora",
            "--max-steps", str(STEPS), "--save-steps", "2", "--seq-len", "64", "--micro-batch", "1",
            "--grad-accum", "2", "--device", "cpu", "--resume", "auto"]
    env = {**child_env(**hooks), "CHEAPTUNE_HOME": str(out.parent / "home")}
    with open(log, "ab") as f:
        return subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300).returncode


def _result(out: Path) -> tuple[list, bytes]:
    summary = json.loads((out / "training_summary.json").read_text())
    return [(h["step"], h["loss"]) for h in summary["loss_history"]], (out / "adapter_model.safetensors").read_bytes()


@pytest.mark.timeout(600)
def test_ddp_kill_and_resume_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(_rows(24))
    ref = tmp_path / "ref" / "out"
    assert _torchrun(tiny_model_dir, data, ref, tmp_path / "ref.log") == 0, (tmp_path / "ref.log").read_text()[-3000:]

    out = tmp_path / "killed" / "out"
    log = tmp_path / "killed.log"
    assert _torchrun(tiny_model_dir, data, out, log, CHEAPTUNE_TEST_KILL_AT_STEP="5") != 0
    newest = resume.choose("auto", out)
    assert newest is not None and ck.step_of(newest) == 4
    assert sharded_checkpoint_problem(newest, world_size=2) is None  # both ranks' rng states are in it
    assert not (out / "training_summary.json").exists()

    assert _torchrun(tiny_model_dir, data, out, log) == 0, log.read_text()[-3000:]
    assert "resuming from" in log.read_text()
    losses, adapter = _result(out)
    ref_losses, ref_adapter = _result(ref)
    assert len(ref_losses) == STEPS
    assert losses == ref_losses
    assert adapter == ref_adapter
