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


@pytest.mark.slow
def test_billed_rate_above_the_plan_reaches_the_meter_the_registry_and_report(tiny_model_dir, tmp_path, recorder,
                                                                                run_cli):
    """A cluster that SkyPilot (scripted) says costs $0.90/h where the plan priced $0.69/h: launch says so,
    records both rates and the re-projection, the run on the machine meters $0.90/h and records the event,
    `report` shows both rates; a rate that would pass the budget is refused on the machine (exit 3)."""
    from cheaptune.launch.backend import LaunchedPrice
    from cheaptune.runs.registry import Registry
    from tests.train.conftest import chat_rows, write_jsonl

    data = tmp_path / "local" / "chat.jsonl"
    data.parent.mkdir()
    write_jsonl(data, chat_rows(8))
    config = tmp_path / "local" / "train.yaml"
    # a cluster terminates itself at the end (on_finish), here only printed: sky autostop ... --down
    config.write_text(yaml.safe_dump({"max_steps": 2, "device": "cpu", "logging_steps": 1, "probe_steps": 0,
                                      "dry_run_shutdown": True}))
    plan = make_plan(offer("runpod", "RTX4090", 0.69, total=3.0), dataset=str(data), total=3.0, budget=20.0)
    plan = plan.model_copy(update={"model": str(tiny_model_dir), "train": TrainSettings(
        method="lora", precision="fp32", micro_batch=1, grad_accum=1, seq_len=64)})
    root = tmp_path / "sandbox"
    opts = LaunchOptions(mode="cluster", cluster="c1", remote_root=str(root / "cheaptune"),
                         checkpoint_dir=str(root / "bucket"), config=config, secrets=())
    recorder.price = LaunchedPrice(0.90, "runpod", "RTX4090:1", "scripted: the instance SkyPilot launched")
    info = launcher.launch(plan, opts, recorder, root / "task.yaml", env={})
    assert (info["planned_per_hour"], info["billed_per_hour"]) == (0.69, 0.90)
    assert "30% above" in info["billed_line"] and "within the $20.00 budget" in info["billed_line"]
    run = Registry().get_run(info["run_id"])
    event = [e for e in run["events"] if e["kind"] == "billed_rate"][0]["detail"]
    assert event["over"] and event["planned_per_hour"] == 0.69 and event["billed_per_hour"] == 0.90
    assert run["cost_projected_usd"] == pytest.approx(3.0 * 0.90 / 0.69)
    code, out, err = run_cli("report", info["run_id"], "--out", str(tmp_path / "report"))
    said = " ".join(out.split())
    assert code == 0 and "$0.6900/h planned, $0.9000/h billed" in said and "billed_rate: billed rate" in said, out

    calls = dict(recorder.calls)
    task = {**calls["launch_cluster"]["task"], **calls["exec_cluster"]["task"]}  # set up, then the priced run
    assert task["envs"]["CHEAPTUNE_BILLED_PRICE"] == "0.9"
    box = materialise(task, root)
    box.env["SKYPILOT_CLUSTER_INFO"] = '{"cluster_name": "c1", "cloud": "RunPod"}'  # what SkyPilot sets there
    log = tmp_path / "log.txt"
    assert box.setup(log) == 0, log.read_text()[-3000:]
    assert box.start_run(log).wait(timeout=600) == 0, log.read_text()[-3000:]
    assert "billed rate $0.9000/h is 30% above the plan's $0.6900/h" in log.read_text()
    remote = Registry(box.home / ".cheaptune" / "runs.sqlite").list_runs()[0]
    assert remote["price_per_hour"] == 0.90  # the machine's meter runs at the billed rate
    remote = Registry(box.home / ".cheaptune" / "runs.sqlite").get_run(remote["id"])
    assert [e["detail"]["billed_per_hour"] for e in remote["events"] if e["kind"] == "billed_rate"] == [0.90]

    box.env["CHEAPTUNE_BILLED_PRICE"] = "6.0"  # $3.00 planned at 8.7x: $26 > the $20 budget
    assert box.start_run(log).wait(timeout=600) == 3, log.read_text()[-3000:]
