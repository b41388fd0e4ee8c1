"""The time model's matmul dtype comes from the training precision, through the policy (one home)."""

from __future__ import annotations

import pytest

from cheaptune.estimate import policy


@pytest.mark.parametrize("gpu_bf16", [True, False])
@pytest.mark.parametrize("method", sorted(policy.DEFAULT_PRECISION))
def test_the_default_precision_computes_in_the_boards_half_type(method, gpu_bf16):
    run = policy.training_precision(method, gpu_bf16)
    assert policy.compute_dtype(run, gpu_bf16) == ("bf16" if gpu_bf16 else "fp16")


def test_explicit_precisions():
    assert [policy.compute_dtype(p, True) for p in policy.PRECISIONS] == ["bf16", "bf16", "fp16", "fp32"]
    assert policy.compute_dtype("bf16-mixed", False) == "fp16"  # a board without bf16 runs the half type it has
    assert policy.compute_dtype(None, True) == "bf16" and policy.compute_dtype("fp32", False) == "fp32"
