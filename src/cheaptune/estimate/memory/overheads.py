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


def workspaces(req, cfg: dict, max_quant_linear: int) -> dict[str, int]:
    """Transient bytes per phase inside kernels (flash backward, bnb dequant) plus cuBLAS's workspace."""
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
    dequant = int(c["bnb_dequant_bytes_per_weight"] * max_quant_linear) if req.method == "qlora" else 0
    from cheaptune.estimate.memory.profiles import get_profile

    if get_profile(req.trainer).quant_state_fp16:  # an fp16 dequantized copy, then its bf16 cast
        dequant *= 2
    base = int(c["cublas_workspace_bytes"])
    return {"forward": base + dequant, "backward": base + max(flash, dequant), "optimizer": base}


def reserved_and_total(peak_allocated: int, slack_fraction: float | None = None) -> tuple[int, int]:
    """(peak reserved, device total); `slack_fraction` replaces the fitted constant (the bench refits it
    without each source it scores)."""
    c = constants()
    fraction = c["allocator_slack_fraction"] if slack_fraction is None else slack_fraction
    slack = max(int(peak_allocated * fraction), int(c["allocator_slack_min_bytes"]))
    reserved = peak_allocated + slack
    return reserved, reserved + int(c["cuda_context_bytes"])
