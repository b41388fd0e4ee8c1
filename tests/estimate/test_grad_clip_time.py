"""Gradient-norm clipping is timed in the optimizer step: three passes over the fp32 gradients per step
(torch clip_grad_norm_: a norm read, then an in-place multiply), for the stacks that clip by default."""

import pytest

from cheaptune.estimate.time import scaling
from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import A100, LLAMA_8B, job

BW = 1555e9 * 0.8  # the test board (no measured row) at steptime.yaml's sustained_bandwidth.default


def test_clipping_adds_three_gradient_passes_to_a_full_fine_tunes_optimizer_step():
    clipped = tp.step_time(job(method="full", micro=1, seq=512), A100)
    plain = tp.step_time(job(method="full", micro=1, seq=512, clip_grads=False), A100)
    assert clipped.parts["optimizer"] - plain.parts["optimizer"] == pytest.approx(LLAMA_8B.params * 12 / BW)
    assert clipped.step_seconds > plain.step_seconds


def test_each_fsdp_rank_clips_only_its_shard():
    layout = scaling.Layout(8, 1, "fsdp")
    clipped = tp.step_time(job(method="full", micro=1, seq=512), A100, layout)
    plain = tp.step_time(job(method="full", micro=1, seq=512, clip_grads=False), A100, layout)
    assert clipped.parts["optimizer"] - plain.parts["optimizer"] == pytest.approx(LLAMA_8B.params / 8 * 12 / BW)


def test_adapters_clip_only_their_own_weights():
    lora = job(method="lora", trainable=20_000_000)
    extra = tp.step_time(lora, A100).parts["optimizer"] - tp.step_time(
        tp.Job(**{**lora.__dict__, "clip_grads": False}), A100).parts["optimizer"]
    assert extra == pytest.approx(20_000_000 * 12 / BW)


@pytest.mark.parametrize(("stack", "clips"), [
    ("hf", True), ("cheaptune", True), ("axolotl", True), ("unsloth", True),  # the HF Trainer (cheaptune, axolotl borrow hf)
    ("litgpt", False), ("torchtune", False),  # max_norm null / clip_grad_norm None in their configs
    ("some-new-stack", True),  # not named: the HF Trainer's default
])
def test_which_stacks_clip_by_default(stack, clips):
    assert tp.clips_gradients(stack) is clips
