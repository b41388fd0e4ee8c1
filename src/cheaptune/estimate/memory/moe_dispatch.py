"""Route 16/32-bit MoE expert matmuls to transformers' own fallback kernel while simulating.

transformers' fused experts call `torch._grouped_mm` whenever `_can_use_grouped_mm` says yes, which on
the simulator's CPU fake tensors (torch > 2.10) is always. Its meta kernel, a copy of the CUDA kernel's
checks (torch/_meta_registrations.py `_meta_grouped_mm_common`), accepts only bf16, so an fp16 step
(T4, V100) or any fp32-weight step (full fine-tunes in mixed precision keep fp32 masters) raised, and
the estimate fell back to the formula. On those boards transformers takes its fallback instead
(transformers/integrations/moe.py `_can_use_grouped_mm`: CUDA below compute capability 8.0), and
torch's CUDA kernel runs a per-group mm loop for non-bf16 inputs (pytorch/pytorch#161407, #161717):
both allocate the same (tokens, out) output per call, which the fallback op's fake kernel reproduces.
bf16 keeps torch's path, byte for byte.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def grouped_mm_bf16_only() -> Iterator[None]:
    """For the block, transformers' grouped-mm dispatch picks torch's kernel only for bf16 expert weights."""
    import torch

    try:
        from transformers.integrations import moe
    except ImportError:  # a transformers without fused experts: nothing to route
        yield
        return
    original = getattr(moe, "_can_use_grouped_mm", None)
    if original is None:
        yield
        return

    def bf16_only(input, weight, offs) -> bool:
        return weight.dtype == torch.bfloat16 and original(input, weight, offs)

    moe._can_use_grouped_mm = bf16_only
    try:
        yield
    finally:
        moe._can_use_grouped_mm = original
