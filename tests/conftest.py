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


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Each test gets its own $CHEAPTUNE_HOME so registries and caches never leak between tests."""
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path_factory.mktemp("cheaptune_home")))


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
