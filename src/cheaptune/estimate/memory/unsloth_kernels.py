"""Unsloth's hand-written autograd kernels, simulated on the HF class: what each keeps for backward.

Unsloth replaces the LoRA'd projections and the RMSNorms of each decoder layer with its own autograd functions,
which save far less than the HF ops with peft (unslothai/unsloth@015bdef0d94a241bcd94eec7a405b1700632180d):

- LoRA_MLP (kernels/fast_lora.py L110): `save_for_backward(gateA, gateB, upA, upB, downA, downB, X, e, g)`: the
  MLP input and the gate and up outputs; the activation and its product are recomputed in backward.
- LoRA_QKV (L418): the attention input X once for q, k and v; LoRA_W (L612): the o projection's input.
- Fast_RMS_Layernorm (kernels/rms_layernorm.py L205): `save_for_backward(X, W, r)`: the input and one fp32 value a row.
- The LoRA matmuls cast the adapters to X's dtype, so no fp32 copy of an input is made (peft's LoRA layer casts
  its input to the fp32 adapter's dtype and keeps that copy per adapted linear).

Unsloth patches a layer's MLP only when gate, up and down all carry LoRA without bias or DoRA, its q/k/v when all
three do, its o projection when it does, and none of them unless lora_dropout is 0 and bias is 'none'
(models/llama.py L3695-3770, FastLlamaModel.patch_peft_model); its RMSNorm kernel runs in every layer of its fast
forwards (full fine-tunes too). The simulation stands each in by a non-reentrant checkpoint of the HF module that
keeps only what the kernel saves (its inputs, and e and g for the MLP); the backward recomputes, as Unsloth's
does. Not stood in: its RoPE kernel (in place; the HF rotation keeps only cos and sin too).

Attention: without flash-attn Unsloth runs xformers where it is installed (utils/attention_dispatch.py L231-241
select_attention_backend; Unsloth's notebooks' banners read 'FA = False' / 'FA2 = False'), and for a model with
fewer key/value heads than query heads it copies K and V to every query head when training (L471-478: expand, then
reshape `if requires_grad`; the same lines at 2024.1, models/llama.py L362-369), which xformers keeps for backward:
each layer holds 2 x (query width - key/value width) more per token than the simulated SDPA, which takes the
key/value heads as they are (enable_gqa). Held unless the run uses flash attention (--attn flash).
"""

from __future__ import annotations

import types

import torch
from torch.utils.checkpoint import checkpoint

from cheaptune.estimate.memory.fused_qkv import hold_activations
from cheaptune.estimate.memory.layers import decoder_layers

_MLP = ("gate_proj", "up_proj", "down_proj")
_QKV = ("q_proj", "k_proj", "v_proj")
_NORM_HINT = "norm"


def _keeps_input(module: torch.nn.Module) -> None:
    """`module` keeps only its input for backward (the checkpoint holds it) and recomputes the rest."""
    inner = module.forward

    def forward(self, x, *args, **kwargs):
        if not (torch.is_grad_enabled() and x.requires_grad):
            return inner(x, *args, **kwargs)
        return checkpoint(inner, x, *args, use_reentrant=False, **kwargs)

    module.forward = types.MethodType(forward, module)


def _lora_no_bias(module: torch.nn.Module | None) -> bool:
    """An adapted linear Unsloth's kernels take: peft LoRA, no bias, no DoRA magnitude."""
    if module is None or not hasattr(module, "lora_A"):
        return False
    base = getattr(module, "base_layer", module)
    return getattr(base, "bias", None) is None and not len(getattr(module, "lora_magnitude_vector", None) or [])


def _fused_mlp(mlp: torch.nn.Module) -> None:
    """LoRA_MLP: keeps X (through gate and up) and their outputs e and g (through the down half)."""
    gate, up, down, act = mlp.gate_proj, mlp.up_proj, mlp.down_proj, mlp.act_fn
    for proj in (gate, up):
        _keeps_input(proj)

    def down_half(e, g):
        return down(act(e) * g)

    def forward(self, x):
        e, g = gate(x), up(x)
        if not (torch.is_grad_enabled() and e.requires_grad):
            return down_half(e, g)
        return checkpoint(down_half, e, g, use_reentrant=False)

    mlp.forward = types.MethodType(forward, mlp)


def _repeated_kv(cfg) -> int:
    """Activations per token xformers' repeated K and V add over the key/value heads themselves (0 without GQA)."""
    heads = int(cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return 2 * (heads - kv) * head_dim


def apply_unsloth_kernels(model, cfg, lora_dropout: float, attn: str = "sdpa") -> int:
    """Make each decoder layer of the (peft-wrapped) model keep what Unsloth's kernels keep; returns the modules
    stood in. LoRA kernels only where Unsloth patches them (module docstring), RMSNorms always; the repeated K and
    V of its xformers attention unless `attn` is flash."""
    layers = decoder_layers(model, int(cfg.num_hidden_layers)) or []
    repeated = _repeated_kv(cfg) if attn != "flash" else 0
    changed = 0
    for layer in layers:
        attn_mod = getattr(layer, "self_attn", None)
        if repeated and attn_mod is not None:
            attn_mod.register_forward_hook(lambda _m, _a, out, n=repeated: hold_activations(out, n))
            changed += 1
        for name, child in layer.named_children():
            if _NORM_HINT in name.lower() and not list(child.children()):
                _keeps_input(child)
                changed += 1
        if lora_dropout:
            continue
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and all(_lora_no_bias(getattr(mlp, n, None)) for n in _MLP) and hasattr(mlp, "act_fn"):
            _fused_mlp(mlp)
            changed += 1
        attn = getattr(layer, "self_attn", None)
        if attn is not None and all(_lora_no_bias(getattr(attn, n, None)) for n in _QKV):
            for n in _QKV:
                _keeps_input(getattr(attn, n))
            changed += 1
        if attn is not None and _lora_no_bias(getattr(attn, "o_proj", None)):
            _keeps_input(attn.o_proj)
            changed += 1
    return changed
