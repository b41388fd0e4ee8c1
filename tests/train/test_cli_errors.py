"""`train` and `estimate` on bad input: one line, exit 2, and the cheap checks before the expensive ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_missing_config_is_said_before_torch_is_imported(tmp_path):
    script = ("import sys\nfrom cheaptune.cli.main import main\ntry:\n    main(['train', 'nosuch.yaml'])\n"
              "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.stdout.split() == ["2", "False", "False"], out.stdout + out.stderr
    assert "config file nosuch.yaml not found" in out.stderr


def test_estimate_rejects_an_unknown_gpu_before_simulating(run_cli, monkeypatch):
    import cheaptune.estimate.memory.memory as memory

    def no_simulation(*a, **k):
        raise AssertionError("simulated before the GPU was checked")

    monkeypatch.setattr(memory, "estimate_memory", no_simulation)
    code, _, err = run_cli("estimate", "--model", "HuggingFaceTB/SmolLM2-135M", "--method", "lora",
                           "--micro-batch", "1", "--seq-len", "128", "--gpu", "H900")
    assert code == 2
    assert err.strip().splitlines() == ["error: unknown GPU 'H900' (did you mean H200, H100, GH200?)"]


@pytest.fixture
def online_without_cache(monkeypatch, tmp_path):
    """As a user's machine: HF_HUB_OFFLINE unset, an empty Hugging Face cache."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))


def _unreachable(*a, **k):
    raise OSError("Name or service not known")


def test_demo_config_offline_without_model_is_one_line(run_cli, monkeypatch, online_without_cache, tmp_path):
    import cheaptune.catalog.models as models

    monkeypatch.setattr(models.socket, "create_connection", _unreachable)
    monkeypatch.chdir(REPO)
    code, _, err = run_cli("train", "examples/demo/config.yaml", "-o", str(tmp_path / "out"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "hub is unreachable" in lines[0]
    assert "--model" in lines[0] and "make demo" in lines[0]  # the demo's model names its local copy


def test_unknown_hub_model_is_one_line(run_cli, monkeypatch, online_without_cache, tiny_model_dir, chat_file, tmp_path):
    from huggingface_hub.errors import RepositoryNotFoundError

    import cheaptune.catalog.models as models

    def not_found(repo_id):
        raise RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # what the hub answers for a missing repo

    monkeypatch.setattr(models, "_hub_config", not_found)
    code, _, err = run_cli("train", "--model", "nosuch/model-xyz", "--data", str(chat_file), "-o", str(tmp_path / "o"))
    assert code == 2
    assert err.strip().splitlines() == [
        "error: model nosuch/model-xyz is not on the hub (or is private: set HF_TOKEN); check the id or pass a "
        "local folder holding config.json and the weights (what save_pretrained writes)"]
    assert not (tmp_path / "o").exists()


def test_wandb_without_api_key_is_one_line(run_cli, monkeypatch, tiny_model_dir, chat_file, tmp_path, fresh_wandb):
    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb"))
    code, _, err = run_cli("train", "--model", str(tiny_model_dir), "--data", str(chat_file), "-o",
                           str(tmp_path / "o"), "--device", "cpu", "--report-to", "wandb")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: report_to: wandb has no API key; run `wandb login`")
    assert not (tmp_path / "o" / "training_summary.json").exists()


def test_the_train_process_bills_from_its_own_start():
    import time

    from cheaptune.cli.train import _own_process, _process_started

    assert _own_process(["/venv/bin/cheaptune", "train", "cfg.yaml"])
    assert _own_process(["/src/cheaptune/__main__.py", "train"])
    assert not _own_process(["/venv/bin/pytest", "-q", "train"])  # the CLI run in-process: training begin
    age = time.monotonic() - _process_started()
    assert 0 < age < time.monotonic()  # this process began before now, on the same clock


def test_a_train_process_is_billed_from_its_start_not_from_training(tmp_path, tiny_model_dir, chat_file):
    """The whole command in its own process, at $3,600/h ($1/s): imports, model load and tokenising are billed,
    as a rented machine bills them. Before the fix (e8fcbdd's parent) the meter started at the first training
    step, so a one-step run was billed for about a second of a ten-second process."""
    import json
    import os
    import time

    env = {**os.environ, "CHEAPTUNE_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cheaptune", "train", "--model", str(tiny_model_dir), "--data",
                           str(chat_file), "-o", str(tmp_path / "o"), "--device", "cpu", "--max-steps", "1",
                           "--price-per-hour", "3600"], env=env, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-600:]
    runs = subprocess.run([sys.executable, "-m", "cheaptune", "runs", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    (run,) = json.loads(runs.stdout)
    assert 0.6 * wall <= run["elapsed_s"] <= wall and run["cost_actual_usd"] >= 0.6 * wall  # $1 a second


def test_missing_dataset_is_said_before_torch_is_imported(tmp_path):
    script = ("import sys\nfrom cheaptune.cli.main import main\ntry:\n    main(['train', '--model', 'm/x', '--data', "
              "'nosuch.jsonl'])\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert "dataset nosuch.jsonl not found" in out.stderr


def test_a_hub_error_fetching_the_config_is_one_line(run_cli, monkeypatch, online_without_cache, chat_file, tmp_path):
    import cheaptune.catalog.models as models

    def lost(repo_id):
        raise OSError("connection reset")  # the probe connected, the download did not finish

    monkeypatch.setattr(models, "_hub_config", lost)
    code, _, err = run_cli("train", "--model", "owner/model", "--data", str(chat_file), "-o", str(tmp_path / "o"))
    assert code == 2 and err.strip().splitlines() == [
        "error: model owner/model: cannot fetch its config.json from the hub (OSError); try again, or pass a local "
        "folder holding config.json and the weights (what save_pretrained writes)"]


@pytest.mark.parametrize("argv", [["version"], ["export", "--help"]])
def test_the_stacks_future_warnings_are_not_shown_the_users_are(argv):
    """For every command, export and eval as well as train (export --to ollama printed is_gradient_checkpointing's)."""
    import warnings

    from cheaptune.cli.main import main

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit):
            main(argv)
        for module in ("transformers.modeling_utils", "trl.trainer.utils", "torch.nn.modules.module", "mytrain"):
            warnings.warn_explicit("`x` is deprecated and will be removed in v6", FutureWarning, "f.py", 1, module=module)
    assert [str(w.message) for w in seen] == ["`x` is deprecated and will be removed in v6"]  # mytrain's only


def test_bitsandbytes_cpu_kernel_notice_is_not_shown_its_errors_are(caplog):
    """bitsandbytes logs at import, on a CPU with AVX-512 BF16, that an optional CPU 4-bit kernel package is missing:
    every plan started with that line. After the CLI starts, that logger passes errors and drops warnings."""
    import logging

    from cheaptune.cli.main import BNB_CPU_LOGGER, main

    logger = logging.getLogger(BNB_CPU_LOGGER)
    old = logger.level
    try:
        with pytest.raises(SystemExit):
            main(["version"])
        with caplog.at_level(logging.DEBUG, logger="bitsandbytes"):
            logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community")
            logger.error("a real bitsandbytes error")
        assert [r.getMessage() for r in caplog.records if r.name == BNB_CPU_LOGGER] == ["a real bitsandbytes error"]
    finally:
        logger.setLevel(old)
