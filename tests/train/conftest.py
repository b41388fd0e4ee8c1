"""Fixtures for the training tests: tiny datasets, a subprocess runner for the kill tests, a SIGTERM timer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
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


@pytest.fixture
def fresh_wandb():
    """wandb, with none of an earlier test's state: wandb keeps its settings (the mode, read from the environment
    when it is first set up) and the session's credentials in one process-wide singleton, so a run made offline
    left every later test offline and `wandb.login` stopped raising (test_cli_errors failed after test_tracking).
    Torn down before and after, each test's wandb reads only the environment that test sets."""
    import wandb

    wandb.teardown()
    yield wandb
    wandb.teardown()


@pytest.fixture(scope="session")
def chat_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "chat.jsonl", chat_rows(24))


def train_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """The CLI arguments every resume test shares (so runs are comparable step for step)."""
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--max-steps", str(STEPS),
            "--save-steps", "2", "--seq-len", "64", "--micro-batch", "1", "--grad-accum", "2",
            "--device", "cpu", *extra]


def child_env(**hooks: str) -> dict[str, str]:
    """The environment of a `python -m cheaptune` child: one thread, and with `hooks` (CHEAPTUNE_TEST_*) the
    test-only sitecustomize in tests/hooks on PYTHONPATH, which reads them (nothing in cheaptune does)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **hooks}
    if hooks:  # torchrun's and accelerate's children inherit it too
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    return env


def start(args: list[str], log: Path, **hooks: str) -> subprocess.Popen:
    """`python -m cheaptune ...` in a subprocess, output to a file (a pipe could fill up and block)."""
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "cheaptune", *args], stdout=f, stderr=subprocess.STDOUT,
                                env=child_env(**hooks))


def sigterm_at_step(out: Path, step: int, timeout_s: float = 240) -> None:
    """SIGTERM this process (what a spot notice does) from a thread, once the in-process run writing to `out`
    has logged `step` optimizer steps (or after `timeout_s`)."""
    def wait_then_signal() -> None:
        deadline = time.monotonic() + timeout_s
        while logged_step(out) < step and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait_then_signal, daemon=True).start()


def summary(out: Path) -> dict:
    return json.loads((out / "training_summary.json").read_text())


def logged_step(out: Path) -> int:
    """The last optimizer step a run wrote to its log (0 before the first): how a kill test knows when to kill."""
    try:
        lines = (out / "train_log.jsonl").read_text().split("\n")[:-1]  # a line still being written is not read
    except FileNotFoundError:
        return 0
    return max((json.loads(x)["step"] for x in lines if x.strip()), default=0)


# GRPO prompt rows and a user reward file, shared by test_grpo.py and test_grpo_resume.py.
LENGTHS = "def reward(prompts, completions, answer, **columns):\n    return [len(c[0]['content']) / 10 for c in completions]\n"


def prompt_rows(n: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"What is {i} plus {i}?"}], "answer": str(2 * i)}
            for i in range(n)]


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("prompts") / "prompts.jsonl", prompt_rows(8))


@pytest.fixture(scope="session")
def lengths_reward(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rewards") / "lengths.py"
    path.write_text(LENGTHS)
    return path
