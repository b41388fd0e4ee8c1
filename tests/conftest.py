"""Shared fixtures: offline, single-threaded, isolated state folder, the tiny random Llama."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


# Caches whose files are pure functions of their key (inputs, model config, estimator and library versions, the
# checkout's fingerprint): one folder per test session, so a model is simulated, a wheel built and the demo model
# converted once per session instead of once per test. Registries, plans and price caches stay per test.
SHARED_CACHES = ("estimate", "plan_fits", "wheels", "models")


@pytest.fixture(scope="session")
def _session_caches(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("session_caches")


@pytest.fixture(autouse=True)
def _isolated_home(request, tmp_path_factory, monkeypatch):
    """Each test gets its own $CHEAPTUNE_HOME so registries and run state never leak between tests; the pure
    caches above are shared unless the test is marked `cold_cache` (it asserts what a cold cache does)."""
    home = tmp_path_factory.mktemp("cheaptune_home")
    if request.node.get_closest_marker("cold_cache") is None:
        shared = request.getfixturevalue("_session_caches")
        (home / "cache").mkdir()
        for name in SHARED_CACHES:
            (shared / name).mkdir(exist_ok=True)
            (home / "cache" / name).symlink_to(shared / name, target_is_directory=True)
    monkeypatch.setenv("CHEAPTUNE_HOME", str(home))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama (safetensors) with a trained tokenizer and a chat template."""
    from cheaptune.demo.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout; a user's clone does not have it."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent (only the team's machines have it)")
    return SHARED_DATA


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit_code, stdout, stderr)."""
    from cheaptune.cli.main import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run
