"""A cold plan's fits in worker processes give the serial plan byte for byte, errors included, and leave no process."""

from __future__ import annotations

import multiprocessing
from types import SimpleNamespace

import pytest

from cheaptune.errors import BadInput, OutOfMemory
from cheaptune.estimate.memory import compute
from cheaptune.plan import parallel

pytestmark = pytest.mark.cold_cache  # both runs simulate: each gets a fresh estimate cache
GIB = 1024**3

ARGS = ("--tokens", "200000", "--seq-len", "256", "--gpu", "RTX4090", "--gpu", "T4", "--gpu", "H100",
        "--method", "lora,qlora", "--json")


def fake_simulation(req, cfg):
    """In place of the fake-tensor step (seconds a point): a peak affine in the micro-batch, a third of the
    activations with checkpointing, so boards of 15-80 GiB search different micro-batches; deterministic."""
    per_seq = (1 if req.grad_ckpt else 3) * GIB * req.seq_len // 256
    base = GIB if req.method == "qlora" else 2 * GIB
    peak = base + req.micro_batch * per_seq
    res = SimpleNamespace(phase_peaks={"forward": peak // 2, "backward": peak, "optimizer": base},
                          breakdown={"weights": base}, trainable_params=1000, total_params=10**6, max_linear_elems=0)
    return (res, {"layers_simulated": [1], "extrapolated": False}), ""


@pytest.fixture
def plan_both(tiny_model_dir, run_cli, monkeypatch, tmp_path):
    """Run the same cold plan serially and with 2 workers: [(exit code, stdout, stderr, pools forked)]."""
    monkeypatch.setattr(compute, "_simulated", fake_simulation)  # inherited by the forked workers
    opened = []
    real_open = parallel.ParallelFit._open

    def counting(self, first, groups):
        opened.append(groups)
        return real_open(self, first, groups)

    monkeypatch.setattr(parallel.ParallelFit, "_open", counting)

    def run(workers: str) -> tuple:
        monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / f"home{workers}"))
        monkeypatch.setenv(parallel.ENV, workers)
        opened.clear()
        out = run_cli("plan", str(tiny_model_dir), *ARGS)
        assert multiprocessing.active_children() == []  # no worker outlives the plan
        return (*out, len(opened))

    return lambda: (run("1"), run("2"))



def test_two_workers_give_the_serial_plan(plan_both):
    serial, two = plan_both()
    assert serial[0] == 0 and serial[3] == 0  # serial: no pool
    assert two[3] >= 1  # the pool ran: lora and qlora on bf16 and fp16 boards are four independent searches
    assert two[:3] == serial[:3]


def test_a_worker_error_reaches_the_user_as_serially(plan_both, monkeypatch):
    def failing(req, cfg):  # inherited by the forked workers
        if req.method == "qlora":
            raise OutOfMemory("simulated failure in qlora")
        return fake_simulation(req, cfg)

    monkeypatch.setattr(compute, "_simulated", failing)
    serial, two = plan_both()
    assert serial[0] == OutOfMemory.exit_code and serial[2].strip() == "error: simulated failure in qlora"
    assert two[3] >= 1 and two[:3] == serial[:3]


def test_a_refused_method_is_excluded_as_serially(plan_both, monkeypatch):
    """BadInput from a fit is the planner's 'this method cannot train this model' exclusion, in both modes."""
    def refusing(req, cfg):
        if req.method == "qlora":
            raise BadInput("qlora refused for this test model")
        return fake_simulation(req, cfg)

    monkeypatch.setattr(compute, "_simulated", refusing)
    serial, two = plan_both()
    assert serial[0] == 0 and "qlora refused for this test model" in serial[1]
    assert two[3] >= 1 and two[:3] == serial[:3]


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_worker_count_is_one_line(value, tiny_model_dir, run_cli, monkeypatch):
    monkeypatch.setenv(parallel.ENV, value)
    code, out, err = run_cli("plan", str(tiny_model_dir), *ARGS)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and parallel.ENV in err
