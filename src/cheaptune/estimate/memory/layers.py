"""The shape of a Hugging Face model's block stack: a config cut to its first blocks, the class built on meta,
the ModuleList of blocks, and the period the stack repeats with.

Why its own module: building (build), LoRA target discovery (targets), litgpt's fused qkv (fused_qkv), the
simulation (simulate) and its extrapolation (extrapolate) all need these, and none of them needs the others' work.
"""

from __future__ import annotations

import torch

LAYER_LIST_KEYS = ("layer_types", "mlp_only_layers")


def set_layer_count(cfg, n: int) -> None:
    """Shrink a config to its first `n` blocks, keeping per-layer lists consistent."""
    cfg.num_hidden_layers = n
    for key in LAYER_LIST_KEYS:
        val = getattr(cfg, key, None)
        if isinstance(val, (list, tuple)) and len(val) > n:
            setattr(cfg, key, list(val)[:n])


def instantiate_on_meta(cfg, dtype: torch.dtype = torch.bfloat16, attn: str = "sdpa"):
    """The real HF causal-LM class for `cfg`, parameters on meta in `dtype`."""
    from transformers import AutoModelForCausalLM

    # flash-attention does not run on CPU; SDPA's CPU flash kernel saves what CUDA flash saves
    cfg._attn_implementation = "eager" if attn == "eager" else "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            try:
                return AutoModelForCausalLM.from_config(cfg, dtype=dtype)
            except ValueError as err:  # architectures without SDPA (e.g. gemma2 soft-capping) train with eager
                if "scaled_dot_product_attention" not in str(err):
                    raise
                cfg._attn_implementation = "eager"
                return AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    finally:
        torch.set_default_dtype(old)


def decoder_layers(model, n: int):
    """The ModuleList of transformer blocks (the one holding `n` modules of one class)."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n and len({type(m) for m in mod}) == 1:
            return mod
    return None


def layer_period(cfg) -> tuple[int, int]:
    """(prefix blocks that do not repeat, period of the repeating pattern)."""
    prefix = int(getattr(cfg, "first_k_dense_replace", 0) or 0)
    period = max(1, int(getattr(cfg, "decoder_sparse_step", 1) or 1))
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, (list, tuple)) and types:
        body = list(types)[prefix:]
        for p in range(1, len(body) + 1):
            if all(body[i] == body[i % p] for i in range(len(body))):
                period = max(period, p)
                break
    return prefix, period
