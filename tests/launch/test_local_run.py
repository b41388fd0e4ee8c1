"""The generated task, executed: the test that says the YAML works.

A plan for the tiny Llama with a local model folder, a dataset and a config becomes a task YAML
(validated by SkyPilot and by train's own checks); its file_mounts, setup and run then execute on
this machine (tests/launch/sandbox.py). Setup installs this checkout's wheel; run trains and puts
checkpoints in the "bucket"; SIGTERM exits 143; running `run` again resumes from the bucket to the
same final adapter as an uninterrupted run.
"""

from __future__ import annotations

import shutil
import time

import pytest
import yaml

from cheaptune.launch import launcher
from cheaptune.launch.options import LaunchOptions
from cheaptune.plan.planfile import TrainSettings

from .conftest import make_plan, offer
from .sandbox import materialise, terminate

ADAPTER = "adapter_model.safetensors"
STEPS = 10


@pytest.mark.slow
def test_generated_task_trains_checkpoints_to_bucket_and_resumes(tiny_model_dir, tmp_path, recorder):
    from tests.train.conftest import chat_rows, logged_step, write_jsonl

    data = tmp_path / "local" / "chat.jsonl"
    data.parent.mkdir()
    write_jsonl(data, chat_rows(24))
    config = tmp_path / "local" / "train.yaml"
    config.write_text(yaml.safe_dump({"max_steps": STEPS, "save_steps": 2, "device": "cpu", "logging_steps": 1}))
    plan = make_plan(offer("runpod", "RTX4090", 0.69, total=3.0), dataset=str(data), total=3.0).model_copy(update={
        "model": str(tiny_model_dir),
        "train": TrainSettings(method="lora", precision="fp32", micro_batch=1, grad_accum=2, seq_len=64),
    })
    root = tmp_path / "sandbox"
    bucket = root / "bucket"
    opts = LaunchOptions(remote_root=str(root / "cheaptune"), checkpoint_dir=str(bucket), config=config, secrets=())
    prep = launcher.prepare(plan, opts, recorder, root / "task.yaml")
    task = yaml.safe_load(prep.yaml_path.read_text())  # what SkyPilot would read
    remote_config = yaml.safe_load((prep.staging_dir / "config.yaml").read_text())
    assert "datasets" not in remote_config and remote_config["output_dir"] == f"{bucket}/final"
    remote_plan = yaml.safe_load((prep.staging_dir / "plan.yaml").read_text())
    assert remote_plan["model"] == opts.model_dir and remote_plan["dataset"] == f"{opts.data_dir}/chat.jsonl"

    box = materialise(task, root)
    log = tmp_path / "log.txt"
    assert box.setup(log) == 0, log.read_text()[-3000:]
    installed = list(root.glob("cheaptune/venv/lib/python*/site-packages/cheaptune/__init__.py"))
    assert installed, "setup did not install the wheel the task ships"

    final = bucket / "final"
    assert box.start_run(log).wait(timeout=600) == 0, log.read_text()[-3000:]
    assert sorted(p.name for p in bucket.glob("checkpoint-*")), "no checkpoint reached the bucket"
    reference = (final / ADAPTER).read_bytes()
    shutil.rmtree(bucket)
    bucket.mkdir()

    proc = box.start_run(log)
    deadline = time.monotonic() + 300
    while logged_step(final) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    terminate(proc)
    assert proc.wait(timeout=300) == 143, log.read_text()[-3000:]
    assert not (final / ADAPTER).exists() and list(bucket.glob("checkpoint-*"))

    assert box.start_run(log).wait(timeout=600) == 0, log.read_text()[-3000:]
    assert "resuming from" in log.read_text()
    assert (final / ADAPTER).read_bytes() == reference
