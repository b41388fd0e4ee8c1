"""report_to: trackers chosen and checked; cheaptune's figures reach TensorBoard, W&B (offline) and MLflow."""

from __future__ import annotations

import importlib.util
import json
import struct
import time
from pathlib import Path

import pytest

from cheaptune.errors import BadInput
from cheaptune.train.tracking import resolve_report_to

OURS = ("cost_usd", "tokens_per_s", "peak_mem_gib", "peak_mem_predicted_gib", "budget_used")


def _args(model, data, out, *extra):
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--max-steps", "2",
            "--seq-len", "64", "--micro-batch", "2", "--device", "cpu", "--price-per-hour", "3.6",
            "--budget", "100", *extra]


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "train.yaml"
    cfg.write_text("predicted_peak_bytes: 1073741824\n")
    return cfg


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files under `logdir` (TFRecord framing, Event protos)."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def read_wandb_history(path: Path) -> list[dict]:
    """The history rows of an offline W&B run file (LevelDB log framing, wandb's Record protos)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    block, pos, pending, rows = 32768, 7, b"", []  # the file starts with a 7-byte ':W&B' header
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST fragment: a whole record
            record = Record.FromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def test_report_to_names_are_checked():
    assert resolve_report_to("none") == [] and resolve_report_to(["none"]) == []
    assert resolve_report_to("tensorboard, tensorboard") == ["tensorboard"]
    with pytest.raises(BadInput, match="unknown tracker 'tensorbord'"):
        resolve_report_to("tensorbord")


def test_missing_tracker_is_one_line_before_any_model_loads(tiny_model_dir, chat_file, tmp_path, run_cli,
                                                            monkeypatch):
    import cheaptune.train.tracking as tracking

    monkeypatch.setattr(tracking, "installed", lambda name: name != "mlflow")
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, tmp_path / "out", "--report-to", "mlflow"))
    assert code == 2 and "mlflow is not installed" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()
    assert resolve_report_to(None) == ["tensorboard"]  # the default when installed
    monkeypatch.setattr(tracking, "installed", lambda name: False)
    assert resolve_report_to(None) == []


def test_tensorboard_gets_loss_and_our_figures(tiny_model_dir, chat_file, tmp_path, run_cli):
    out = tmp_path / "out"
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out), str(_config(tmp_path)))  # default tracker
    assert code == 0, err
    scalars = read_scalars(out / "runs")
    assert [s for s, _ in scalars["train/loss"]] == [1, 2]
    for key in OURS:  # every log step (and the end-of-training summary log)
        assert {s for s, _ in scalars[f"train/{key}"]} == {1, 2}, key
    assert scalars["train/peak_mem_predicted_gib"][0][1] == pytest.approx(1.0)
    assert scalars["train/cost_usd"][-1][1] > 0 and scalars["train/tokens_per_s"][-1][1] > 0


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="the wandb extra is not installed")
def test_wandb_offline_run_has_our_figures(tiny_model_dir, chat_file, tmp_path, run_cli, monkeypatch, fresh_wandb):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, tmp_path / "out", "--report-to", "wandb"),
                           str(_config(tmp_path)))
    assert code == 0, err
    fresh_wandb.finish()  # in-process run: flush what the CLI's exit would
    (log,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    # wandb's writer is a separate service process that flushes on its own schedule: wait for the rows
    deadline = time.monotonic() + 60
    while not (steps := [h for h in read_wandb_history(log) if "train/loss" in h]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [h["train/global_step"] for h in steps] == [1, 2]
    for key in OURS:
        assert all(f"train/{key}" in h for h in steps), key


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="the mlflow extra is not installed")
def test_mlflow_file_store_has_our_figures(tiny_model_dir, chat_file, tmp_path, run_cli, monkeypatch):
    uri = (tmp_path / "mlruns").as_uri()  # a local file store (MLflow 3 asks to opt in; sqlite is 50x slower here)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, tmp_path / "out", "--report-to", "mlflow"),
                           str(_config(tmp_path)))
    assert code == 0, err
    import mlflow

    (run,) = mlflow.MlflowClient(uri).search_runs(["0"])
    for key in ("loss", *OURS):
        assert key in run.data.metrics, key
    assert run.data.metrics["peak_mem_predicted_gib"] == pytest.approx(1.0)
