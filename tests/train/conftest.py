"""Fixtures for the training tests: tiny datasets, a subprocess runner for the kill tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOOKS = Path(__file__).resolve().parents[1] / "hooks"
STEPS = 16  # each run: 16 optimizer steps of 2 micro-batches at seq 64 (crosses epoch boundaries)


def chat_rows(n: int) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                          {"role": "assistant", "content": f"The answer is {2 * i}."}]} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="session")
def chat_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "chat.jsonl", chat_rows(24))


def train_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """The CLI arguments every resume test shares (so runs are comparable step for step)."""
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--max-steps", str(STEPS),
            "--save-steps", "2", "--seq-len", "64", "--micro-batch", "1", "--grad-accum", "2",
            "--device", "cpu", *extra]


def start(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    """`python -m cheaptune ...` in a subprocess, output to a file (a pipe could fill up and block)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **env}
    if env:  # kill hooks: the test-only sitecustomize in tests/hooks reads them (nothing in cheaptune does)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "cheaptune", *args], stdout=f, stderr=subprocess.STDOUT,
                                env=full_env)


def summary(out: Path) -> dict:
    return json.loads((out / "training_summary.json").read_text())


def logged_step(out: Path) -> int:
    """The last optimizer step a run wrote to its log (0 before the first): how a kill test knows when to kill."""
    try:
        lines = (out / "train_log.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(x)["step"] for x in lines if x.strip()), default=0)
