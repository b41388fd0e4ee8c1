"""litgpt's loop keeps the last micro-step's logits list, and the autograd graph it references, until the next
forward returns (profiles.yaml litgpt holds_last_outputs); with bitsandbytes < 0.43.2 that graph holds every 4-bit
matmul's input, which MatMul4Bit stored on ctx outside save_for_backward."""

from __future__ import annotations

import dataclasses

import pytest

from cheaptune.estimate.memory.profiles import _profiles, get_profile
from cheaptune.estimate.memory.simulate import _carries_last_outputs, simulate
from cheaptune.estimate.memory.tracker import PeakTracker


def _run(make_request, cfg, carried: bool, **kw) -> tuple[int, int]:
    """(bytes alive as the reported step starts, its forward peak), with litgpt's loop carrying outputs or not."""
    req = make_request(cfg, method="qlora", trainer="litgpt==0.4.0.dev0", lora_targets="qv", **kw)
    starts = []
    reset = PeakTracker.reset_peaks
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "litgpt", dataclasses.replace(get_profile("litgpt"), holds_last_outputs=carried))
        mp.setattr(PeakTracker, "reset_peaks", lambda self: (starts.append(self.total), reset(self)))
        res = simulate(req, cfg)
    return starts[-1], res.phase_peaks["forward"]


def _kept_inputs(cfg, tokens: int) -> int:
    """What one micro-step's 4-bit matmuls keep (bf16): per block the attention input (q, k, v share it; not the first
    block's, the frozen embedding's, which needs no gradient), the output projection's, the MLP input (gate and up
    share it) and the down projection's; and the 4-bit head's input."""
    h, i, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    return tokens * 2 * (n * (3 * h + i) - h + h)


def test_the_previous_micro_steps_logits_and_4bit_inputs_live_through_the_next_forward(make_request, tiny_cfg):
    tokens = 2 * 64
    old_logits = tokens * tiny_cfg.vocab_size * 4  # Fabric casts litgpt's outputs to fp32
    kw = dict(micro_batch=2, seq_len=64, versions="bitsandbytes==0.42.0")
    (start, peak), (start0, peak0) = _run(make_request, tiny_cfg, True, **kw), _run(make_request, tiny_cfg, False, **kw)
    kept = _kept_inputs(tiny_cfg, tokens)
    assert old_logits + kept <= start - start0 <= (old_logits + kept) * 1.02  # rounded up to 512-byte blocks
    assert peak - peak0 >= kept
    kw["versions"] = "bitsandbytes==0.44.0"  # ctx keeps only the weight: the old logits alone (nothing else moves)
    start, _ = _run(make_request, tiny_cfg, True, **kw)
    assert old_logits <= start - start0 <= old_logits * 1.02


def test_lit_gpt_before_0_2_ran_its_longest_batch_first_so_nothing_was_carried_into_it(make_request, tiny_cfg):
    new = make_request(tiny_cfg, method="qlora", trainer="litgpt==0.4.0.dev0")
    old = make_request(tiny_cfg, method="qlora", trainer="litgpt==0.1.0")
    assert _carries_last_outputs(new) and not _carries_last_outputs(old)
    assert not _carries_last_outputs(make_request(tiny_cfg, method="qlora", trainer="hf"))


def test_a_tensor_stored_on_ctx_outlives_backward_while_the_output_is_held():
    """The premise, on real tensors: save_for_backward's tensors are freed by backward, a ctx attribute (bitsandbytes <
    0.43.2 MatMul4Bit's ctx.tensors) lives as long as the graph node, i.e. while the loop still holds the outputs."""
    import weakref

    import torch

    class OnCtx(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.kept = a * 1  # a new tensor held by the node only
            kept.append(weakref.ref(ctx.kept))
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    kept: list = []
    x = torch.ones(8, requires_grad=True)
    out = OnCtx.apply(x)
    out.sum().backward()
    assert kept[0]() is not None  # backward done, output still bound: the node and its ctx attribute live
    del out
    assert kept[0]() is None  # the loop lets go of the output: freed
