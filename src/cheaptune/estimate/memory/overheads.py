"""CUDA-side memory the CPU simulation cannot see: kernel workspaces, allocator slack, CUDA context.

Constants and their sources live in data/overheads.yaml so calibration changes data, not code.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

DATA = Path(__file__).parents[1] / "data" / "overheads.yaml"


@cache
def constants() -> dict[str, float]:
    raw = yaml.safe_load(DATA.read_text())
    return {k: v["value"] for k, v in raw.items() if isinstance(v, dict)}


def dequant_copies(req) -> int:
    """Dequantized copies of a 4-bit weight a matmul holds at once: two where the trainer quantized from fp16
    (Lightning: dequantize_4bit gives fp16, then .to(A.dtype) a bf16 copy), else one."""
    from cheaptune.estimate.memory.profiles import get_profile

    return 2 if get_profile(req.trainer).quant_state_fp16 else 1


def workspaces(req, cfg: dict, max_quant_linear: int, simulated: bool = False) -> dict[str, int]:
    """Transient bytes per phase inside kernels (flash backward, bnb dequant) plus cuBLAS's workspace.

    `simulated`: the step was simulated, which holds each gemm_4bit's dequantized weight while that op runs
    (simulate._dequant_inside) and sees backward's dequantize_4bit output, one copy; only the copies it does not
    see are added, to backward. An analytic estimate adds the largest weight's copies to both phases."""
    c = constants()
    heads = int(cfg.get("num_attention_heads") or 1)
    hidden = int(cfg.get("hidden_size") or 0)
    head_dim = int(cfg.get("head_dim") or (hidden // heads if heads else 0))
    pad = int(c["flash_bwd_seq_pad"])
    s_pad = -(-req.seq_len // pad) * pad
    flash = 0
    if req.attn in ("sdpa", "flash"):
        flash = int(c["flash_bwd_bytes_per_token_per_head_dim"] * req.micro_batch * s_pad * heads * head_dim)
        flash += 4 * req.micro_batch * heads * s_pad  # softmax_d
    copy = int(c["bnb_dequant_bytes_per_weight"] * max_quant_linear) if req.method == "qlora" else 0
    forward, backward = (0, copy * (dequant_copies(req) - 1)) if simulated else (copy * dequant_copies(req),) * 2
    base = int(c["cublas_workspace_bytes"])
    return {"forward": base + forward, "backward": base + max(flash, backward), "optimizer": base}


def reserved_and_total(peak_allocated: int, slack_fraction: float | None = None) -> tuple[int, int]:
    """(peak reserved, device total); `slack_fraction` replaces the fitted constant (the bench refits it
    without each source it scores)."""
    c = constants()
    fraction = c["allocator_slack_fraction"] if slack_fraction is None else slack_fraction
    slack = max(int(peak_allocated * fraction), int(c["allocator_slack_min_bytes"]))
    reserved = peak_allocated + slack
    return reserved, reserved + int(c["cuda_context_bytes"])
