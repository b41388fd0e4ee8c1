"""bitsandbytes' gemm_4bit dequantizes its whole weight inside the op, which its fake implementation does not
show: the simulation holds those bytes while that op runs, not at the step's other moments."""

from __future__ import annotations

import torch

from cheaptune.estimate.memory.overheads import workspaces
from cheaptune.estimate.memory.simulate import _dequant_inside
from cheaptune.estimate.memory.tracker import PeakTracker


def test_bytes_inside_an_op_count_while_it_runs_only():
    a, b = torch.ones(64, 64), torch.ones(64, 64)
    tracker = PeakTracker()
    tracker.inside_op = lambda func, _args: 10**6 if func is torch.ops.aten.mm.default else 0
    with tracker:
        c = a @ b  # alive: the output, plus the op's own 1 MB
        d = c + 1  # after it: the two outputs only
    assert tracker.peak == 2 * 64 * 64 * 4 // 2 + 10**6  # one 16 KiB output, rounded to 512 B, and the buffer
    assert tracker.peak_breakdown["temporaries"] == 10**6
    del d


def test_gemm_4bit_holds_its_dequantized_weight_and_lightning_two_copies(make_request, tiny_cfg):
    import bitsandbytes  # noqa: F401 - registers torch.ops.bitsandbytes

    gemm, args = torch.ops.bitsandbytes.gemm_4bit.default, (None, None, torch.Size([4096, 1024]))
    assert _dequant_inside(make_request(tiny_cfg, method="qlora", trainer="hf"))(gemm, args) == 2 * 4096 * 1024
    assert _dequant_inside(make_request(tiny_cfg, method="qlora", trainer="litgpt"))(gemm, args) == 4 * 4096 * 1024
    assert _dequant_inside(make_request(tiny_cfg, method="qlora"))(torch.ops.aten.mm.default, args) == 0
    assert _dequant_inside(make_request(tiny_cfg, method="lora")) is None


def test_a_simulated_step_adds_only_the_dequantized_copies_it_does_not_see(make_request, tiny_cfg):
    """Forward: none (held inside each gemm_4bit); backward: dequantize_4bit's output is simulated, Lightning's bf16
    cast of it is not. An analytic estimate adds the largest weight's copies to both."""
    cfg, big = tiny_cfg.to_dict(), 4096 * 4096
    lit, hf = (make_request(tiny_cfg, method="qlora", trainer=t) for t in ("litgpt", "hf"))
    base = workspaces(make_request(tiny_cfg, method="lora"), cfg, big, simulated=True)
    assert workspaces(hf, cfg, big, simulated=True)["forward"] == base["forward"]
    assert workspaces(hf, cfg, big, simulated=True)["backward"] == base["backward"]
    assert workspaces(lit, cfg, big, simulated=True)["backward"] >= base["forward"] + 2 * big
    assert workspaces(lit, cfg, big)["forward"] == base["forward"] + 4 * big
