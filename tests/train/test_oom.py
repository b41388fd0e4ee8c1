"""Out of memory, handled: an injected OOM (a callback this test adds, not a product hook) drives the
fallbacks; the run keeps its effective batch, its data order and every step it trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from cheaptune.errors import OutOfMemory
from cheaptune.runs.registry import Registry
from cheaptune.train import oom
from cheaptune.train.config import TrainConfig, validate
from cheaptune.train.run import train

STEPS = 6
LOSS_RTOL = 1e-3  # same samples per optimizer step, only the float summation order differs


class OomAbove(TrainerCallback):
    """The model's forward raises torch.OutOfMemoryError while the micro-batch is above `limit`, from
    optimizer step `at` on: a GPU that runs out of memory mid-run."""

    def __init__(self, limit: int, at: int) -> None:
        self.limit, self.at, self.raised, self._handle = limit, at, 0, None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self._handle is not None:
            self._handle.remove()
        micro = args.per_device_train_batch_size

        def hook(module, inputs):
            if micro > self.limit and state.global_step >= self.at:
                self.raised += 1
                raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")

        self._handle = model.register_forward_pre_hook(hook)


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"Spell {i} in words, then add {i % 7}."},
                          {"role": "assistant", "content": f"{i} plus {i % 7} is {i + i % 7}."}]} for i in range(96)]
    path = tmp_path_factory.mktemp("oomdata") / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def config(model: Path, data: Path, out: Path, **extra) -> TrainConfig:
    return validate({"base_model": str(model), "datasets": [{"path": str(data)}], "output_dir": str(out),
                     "max_steps": STEPS, "sequence_len": 64, "micro_batch_size": 4, "device": "cpu",
                     "logging_steps": 1, "probe_steps": 2, "seed": 7, "learning_rate": 1e-3, **extra})


def losses(out: Path) -> dict[int, float]:
    """Step -> logged loss (a step logged again after a restart keeps its last value)."""
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_fallback_order_keeps_the_effective_batch():
    cfg = validate({"micro_batch_size": 6, "gradient_accumulation_steps": 3})
    seen = []
    while (fb := oom.next_fallback(cfg)) is not None:
        seen.append(fb.name)
        cfg = cfg.model_copy(update=fb.changes)
        assert cfg.micro_batch_size * cfg.gradient_accumulation_steps == 18
    assert seen == ["gradient_checkpointing", "micro_batch", "micro_batch"] and cfg.micro_batch_size == 1
    allowed = cfg.model_copy(update={"allow_optimizer_change": True})
    assert oom.next_fallback(allowed).changes == {"optimizer": oom.PAGED_8BIT}


def test_injected_oom_falls_back_and_matches_the_uninterrupted_run(tiny_model_dir, rows_file, tmp_path, capsys):
    hook = OomAbove(limit=2, at=2)
    out = tmp_path / "oom"
    result = train(config(tiny_model_dir, rows_file, out), callbacks=(hook,))
    err = capsys.readouterr().err
    assert hook.raised == 2  # at micro-batch 4, then 4 again with checkpointing; micro-batch 2 fits
    assert result.summary["steps"] == STEPS
    assert "out of memory at step 2: gradient checkpointing on" in err
    assert "micro-batch 4 -> 2, accumulation 1 -> 2 (same effective batch)" in err
    run = Registry().list_runs()[0]
    events = [e for e in Registry().get_run(run["id"])["events"] if e["kind"] == "oom_fallback"]
    assert [e["detail"]["fallback"] for e in events] == ["gradient_checkpointing", "micro_batch"]
    assert all(e["detail"]["step"] == 2 for e in events)
    assert json.loads((out / oom.STATE_FILE).read_text()) == {
        "gradient_checkpointing": True, "micro_batch_size": 2, "gradient_accumulation_steps": 2}

    # The same run, uninterrupted, at the final settings: the same losses step for step.
    ref_out = tmp_path / "ref"
    train(config(tiny_model_dir, rows_file, ref_out, micro_batch_size=2, gradient_accumulation_steps=2,
                 gradient_checkpointing=True))
    got, want = losses(out), losses(ref_out)
    assert sorted(got) == list(range(1, STEPS + 1)) == sorted(want)
    assert got == pytest.approx(want, rel=LOSS_RTOL)
    assert len(set(want.values())) > 3  # the losses differ step to step, so a changed data order would show


def test_out_of_memory_after_every_fallback_is_exit_11_with_a_checkpoint(tiny_model_dir, rows_file, tmp_path):
    out = tmp_path / "never-fits"
    with pytest.raises(OutOfMemory) as info:
        train(config(tiny_model_dir, rows_file, out, max_steps=3), callbacks=(OomAbove(limit=0, at=1),))
    assert info.value.exit_code == 11
    assert "checkpoint-1" in str(info.value) and "GPU with more memory" in str(info.value)
    assert (out / "checkpoint-1").is_dir()
    run = Registry().list_runs()[0]
    assert run["status"] == "failed" and run["stop_reason"] == "oom"
    kinds = [e["kind"] for e in Registry().get_run(run["id"])["events"]]
    assert kinds.count("oom_fallback") == 3 and "oom" in kinds  # checkpointing, 4 -> 2, 2 -> 1, then none
