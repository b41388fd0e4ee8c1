"""The launch path up to SkyPilot's API (recording double at the seam), the registry record, the CLI,
and the real SkyPilot path with no cloud/API server reachable -> one line mentioning `sky check`, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from cheaptune.errors import BadInput
from cheaptune.launch import launcher
from cheaptune.launch.backend import SkyBackend, translate
from cheaptune.launch.options import LaunchOptions
from cheaptune.runs.registry import Registry

from .conftest import make_plan, offer


def test_managed_job_launch_calls_seam_and_records_run(tmp_path, recorder):
    plan = make_plan(offer("aws", "A100-80GB", 4.1, spot=True, total=5.0),
                     [offer("gcp", "A100-80GB", 4.4, spot=True, total=5.3)])
    env = {"HF_TOKEN": "hf_value", "PATH": "/bin"}
    info = launcher.launch(plan, LaunchOptions(), recorder, tmp_path / "t.yaml", env=env)
    kinds = [c[0] for c in recorder.calls]
    assert kinds == ["validate", "launch_job", "launched_price"]
    call = recorder.calls[1][1]
    assert call["secrets"] == {"HF_TOKEN": "hf_value"}  # values reach SkyPilot only through the seam
    assert call["task"]["secrets"] == {"HF_TOKEN": None}  # unset names are left out, never a value
    assert call["name"] == info["name"] and info["job_id"] == 42
    assert info["unset_secrets"] == ["WANDB_API_KEY", "CHEAPTUNE_WEBHOOK_URL"]
    assert "hf_value" not in (tmp_path / "t.yaml").read_text()
    run = Registry().get_run(info["run_id"])
    assert (run["provider"], run["gpu"], run["price_per_hour"]) == ("aws", "A100-80GB", 4.1)
    assert run["cost_predicted_usd"] == 5.0 and "spot" in run["offer"]
    assert run["remote"] == "skypilot:job/42" and run["status"] == "launched"
    launched = [e for e in run["events"] if e["kind"] == "launched"][0]["detail"]
    assert launched["job_id"] == 42 and launched["failover"] and launched["mode"] == "job"


def test_cluster_launch(tmp_path, recorder):
    info = launcher.launch(make_plan(offer("lambda", "H100", 2.5)), LaunchOptions(mode="cluster", cluster="dev"),
                           recorder, tmp_path / "t.yaml", env={})
    kinds = [c[0] for c in recorder.calls]
    assert kinds == ["validate", "launch_cluster", "launched_price", "exec_cluster"]  # set up, priced, then run
    setup, run = recorder.calls[1][1], recorder.calls[3][1]
    assert setup["cluster"] == "dev" and setup["idle_minutes"] == 10 and "run" not in setup["task"]
    assert run["cluster"] == "dev" and run["task"]["run"] and "setup" not in run["task"]
    assert run["task"]["resources"] == {"accelerators": "H100:1"}  # the run sees the cluster's GPU
    assert "secrets" not in setup["task"] and info["cluster"] == "dev" and info["billed_per_hour"] is None


def test_cli_dry_run_writes_validated_yaml(tmp_path, plan_file, run_cli):
    out = tmp_path / "out" / "task.yaml"
    code, stdout, err = run_cli("launch", str(plan_file), "--dry-run", "--out", str(out), "--json")
    assert code == 0, err
    assert yaml.safe_load(out.read_text())["resources"]["accelerators"] == "RTX4090:1"
    assert '"task_yaml"' in stdout and '"secrets_unset"' in stdout  # names only, never values


@pytest.mark.parametrize("args,needle", [
    (["missing.yaml", "--dry-run"], "not found"),
    (["{plan}", "--dry-run", "--gpu", "RTX9999"], "unknown GPU"),
    (["{plan}", "--dry-run", "--margin", "3"], "--margin"),
    (["{plan}", "--dry-run", "--checkpoint-dir", "ckpt"], "absolute path"),
    (["{plan}", "--dry-run", "--secret", "HF TOKEN=x"], "NAME"),
    (["{plan}", "--dry-run", "--provider", "tensordock", "--gpu", "RTX4090"], "tensordock"),
    (["{plan}", "--dry-run", "--region", "mars-1"], "region 'mars-1'"),  # plan's catalog checks, as plan does
    (["{plan}", "--dry-run", "--model", "nosuch/model-xyz"], "nosuch/model-xyz"),
    (["{plan}", "--dry-run", "--model", "meta-llama/Llama-2-7b-hf"], "HF_TOKEN"),
    (["{plan}", "--dry-run", "--max-hourly-cost", "nan"], "--max-hourly-cost"),
    (["{plan}", "--dry-run", "--store", "dropbox"], "--store"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle, tmp_path, plan_file, run_cli, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    code, _out, err = run_cli("launch", *[a.format(plan=plan_file) for a in args], "--out", str(tmp_path / "t.yaml"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t.yaml").exists()


def test_a_plan_without_data_names_the_current_flag(tmp_path, run_cli):
    """A plan made from a token count has no dataset: the error names --data, not the deprecated --dataset."""
    from cheaptune.plan.planfile import save

    plan = tmp_path / "tokens-plan.yaml"
    save(make_plan(offer("runpod", "RTX4090", 0.69, total=3.0), dataset=None, total=3.0), plan)
    code, _out, err = run_cli("launch", str(plan), "--dry-run", "--out", str(tmp_path / "t.yaml"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--data FILE" in err and "--dataset" not in err, err


def test_override_prices_come_from_load_offers(plan_file):
    from cheaptune.catalog.sources import load_offers
    from cheaptune.launch.overrides import apply_overrides
    from cheaptune.plan.planfile import load

    o = next(x for x in load_offers() if x.provider == "runpod")
    plan = apply_overrides(load(plan_file), gpu=o.gpu, gpu_count=o.gpu_count, provider="runpod", spot=o.spot)
    assert plan.offer.gpu == o.gpu and plan.alternatives == []
    cheapest = min(x.price_per_hour for x in load_offers()
                   if (x.provider, x.gpu, x.gpu_count, x.spot) == ("runpod", o.gpu, o.gpu_count, o.spot))
    assert plan.offer.price_per_hour == cheapest


def test_translation_of_skypilot_errors():
    import requests
    from sky import exceptions

    for exc in (exceptions.NoCloudAccessError("Cloud access is not set up. Run: sky check"),
                exceptions.ResourcesUnavailableError("No launchable resource found for task"),
                exceptions.ApiServerConnectionError("http://127.0.0.1:46580"),
                requests.exceptions.ConnectionError("refused")):
        ours = translate(exc)
        assert isinstance(ours, BadInput) and ours.exit_code == 2
        assert "sky check" in str(ours) and "\n" not in str(ours)
    assert translate(ValueError("ours")) is None


def test_real_skypilot_api_server_unreachable(monkeypatch):
    # A remote endpoint that refuses: SkyPilot raises at once instead of starting a local server.
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(BadInput, match="sky check"):
        SkyBackend().status(None)


def test_real_launch_without_cloud_exits_2_with_one_line(plan_file, tmp_path):
    """The real SkyPilot client, no API server, local auto-start disabled: bounded by a timeout."""
    env = {**os.environ, "SKYPILOT_DISABLE_LOCAL_API_SERVER": "1", "CHEAPTUNE_HOME": str(tmp_path / "home"),
           "HOME": str(tmp_path)}
    env.pop("SKYPILOT_API_SERVER_ENDPOINT", None)
    proc = subprocess.run([sys.executable, "-m", "cheaptune", "launch", str(plan_file), "--install", "cheaptune"], env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert lines[-1].startswith("error:") and "sky check" in lines[-1] and "Traceback" not in proc.stderr


def test_status_sync_updates_launched_run(tmp_path, recorder):
    plan = make_plan(offer("aws", "A100-80GB", 4.1, spot=True, total=5.0))
    info = launcher.launch(plan, LaunchOptions(), recorder, tmp_path / "t.yaml", env={})
    assert launcher.sync_status([{"job_id": 42, "status": "PENDING"}]) == 0
    assert Registry().get_run(info["run_id"])["status"] == "launched"
    assert launcher.sync_status([{"job_id": 42, "status": "RECOVERING"}]) == 1
    assert Registry().get_run(info["run_id"])["status"] == "running"
    assert launcher.sync_status([{"job_id": 42, "status": "SUCCEEDED"}, {"job_id": 7, "status": "FAILED"}]) == 1
    run = Registry().get_run(info["run_id"])
    assert run["status"] == "finished" and run["ended_at"] is not None


def _servers(port: int) -> list:
    import psutil

    return [p for p in psutil.process_iter(attrs=["cmdline"])
            if "sky.server.server" in " ".join(p.info["cmdline"] or []) and f"--port={port}" in p.info["cmdline"]]


@pytest.mark.slow
def test_no_api_server_left_behind_and_status_without_jobs(plan_file, tmp_path):
    """The real SkyPilot client starting its own local API server (an isolated port and state folder):
    a launch that fails with no cloud exits 2 naming `sky check`, `--status` with no jobs is exit 0
    "no managed jobs", and neither leaves the server it started running."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path / "sky"),
           "SKYPILOT_API_SERVER_LOCAL_PORT": str(port), "CHEAPTUNE_HOME": str(tmp_path / "home")}
    for key in ("SKYPILOT_DISABLE_LOCAL_API_SERVER", "SKYPILOT_API_SERVER_ENDPOINT"):
        env.pop(key, None)

    def cheaptune(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cheaptune", "launch", *args], env=env, capture_output=True,
                              text=True, timeout=300)

    try:
        proc = cheaptune(str(plan_file), "--install", "cheaptune")
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
        assert proc.returncode == 2 and last.startswith("error:") and "sky check" in last, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr and not _servers(port)
        proc = cheaptune("--status")
        assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "no managed jobs", proc.stderr[-2000:]
        assert not _servers(port)
    finally:
        for p in _servers(port):  # only a server on this test's own port
            p.kill()


def _edited(plan_file, tmp_path, edit) -> str:
    raw = yaml.safe_load(plan_file.read_text())
    edit(raw)
    out = tmp_path / "edited.yaml"
    out.write_text(yaml.safe_dump(raw))
    return str(out)


_EDITS = {
    "nan-price": (lambda r: r["offer"].update(price_per_hour=float("nan")), "offer.price_per_hour"),
    "zero-price": (lambda r: r["offer"].update(price_per_hour=0.0), "no price"),  # the meter would run at $0/h
    "negative-budget": (lambda r: r.update(budget_usd=-5.0), "budget_usd"),
    "inf-gpus": (lambda r: r["offer"].update(gpu_count=float("inf")), "offer.gpu_count"),
}
# A zero price is a machine already paid for (the CPU a plan runs on): only launch, which rents one, refuses it.
_CASES = [(cmd, edit) for edit in _EDITS for cmd in ("launch", "train") if (cmd, edit) != ("train", "zero-price")]


@pytest.mark.parametrize("command,edit", _CASES)
def test_hand_edited_plan_cannot_switch_the_budget_cap_off(command, edit, tmp_path, plan_file, run_cli):
    change, needle = _EDITS[edit]
    plan = _edited(plan_file, tmp_path, change)
    out = str(tmp_path / "o")
    args = ["launch", plan, "--dry-run", "--out", out] if command == "launch" else ["train", "--plan", plan,
                                                                                      "--output-dir", out]
    code, _out, err = run_cli(*args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_sky_backend_reads_the_launched_clusters_price_from_its_handle(monkeypatch):
    """SkyBackend.launched_price on what sky.status returns (StatusResponse.handle.launched_resources,
    launched_nodes); a managed job (no cluster) and a failing call give None, never an error."""
    import contextlib
    from types import SimpleNamespace

    from cheaptune.launch import backend as be
    from cheaptune.launch.backend import LaunchResult

    res = SimpleNamespace(accelerators={"A10G": 1}, cloud="AWS", instance_type="g5.xlarge", region="us-east-1",
                          get_cost=lambda seconds: 1.006 * seconds / 3600)
    record = SimpleNamespace(handle=SimpleNamespace(launched_resources=res, launched_nodes=2))
    fake = SimpleNamespace(status=lambda cluster_names: ("status", cluster_names), stream_and_get=lambda req: [record])
    monkeypatch.setattr(be, "_sky", lambda: fake)
    monkeypatch.setattr(be, "server_session", lambda keep_on_success: contextlib.nullcontext())
    price = SkyBackend().launched_price(LaunchResult(job_id=1, cluster="c1"))
    assert price is not None and price.per_hour == pytest.approx(2.012) and price.cloud == "aws"
    assert price.accelerators == "A10G:1" and "g5.xlarge" in price.source
    assert SkyBackend().launched_price(LaunchResult(job_id=1)) is None
    fake.stream_and_get = lambda req: []
    assert SkyBackend().launched_price(LaunchResult(job_id=1, cluster="c1")) is None


@pytest.mark.parametrize("key", ["optimizer", "lr_scheduler"])
def test_a_config_name_transformers_lacks_is_refused_by_the_dry_run(key, tmp_path, plan_file, run_cli):
    """train refuses these before loading (train.config.check_hf_names); the dry run checks what train on the
    machine accepts, so it refuses them too, before a VM boots and installs only to stop there."""
    config = tmp_path / "cfg.yaml"
    config.write_text(f"{key}: banana\n")
    out = tmp_path / "t.yaml"
    code, _out, err = run_cli("launch", str(plan_file), "--dry-run", "--config", str(config), "--out", str(out))
    assert code == 2 and f"{key} 'banana'" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
