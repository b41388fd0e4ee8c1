"""litgpt's fused attention projection and its LoRA, simulated on the HF class of the same shape.

litgpt computes q, k and v with one Linear and adapts it with one LoRA layer (lit_gpt/model.py L196-227 and
lit_gpt/lora.py L351-386, zero_pad L293, at 8641822, the resource tables' commit; litgpt/model.py L472-499, L594 and
litgpt/lora.py L405-413, L326 at v0.5.13). What that keeps for backward, where the HF class with peft differs:

- the fused output: q, k and v are views of it and SDPA saves v, so q's and k's parts stay alive until the
  attention's backward. Only with as many key/value heads as query heads: otherwise litgpt repeats k and v
  into copies and the fused output dies. HF classes with a fused projection already keep theirs.
- not held: with fewer key/value heads than query heads, the repeated k and v (one per query head) SDPA saves,
  where the HF class passes the key/value heads with enable_gqa (litgpt/model.py L256-262 at v0.4.13, L536-539 at
  v0.5.13). As a term it moved rows of one source only (the config-hub table), so it is left out (profiles.yaml
  litgpt not_simulated says so in every estimate).
- one LoRA dropout for the fused input (one mask, one dropped copy), where peft drops per projection.
- zero_pad's index_copy keeps its source, the LoRA update of the adapted parts, when q, k or v is not adapted
  (torch derivatives.yaml index_copy: `grad.index_select(dim, index).expand_as(source)` saves `source`).
"""

from __future__ import annotations

import weakref

import torch

from cheaptune.estimate.memory.layers import decoder_layers
from cheaptune.estimate.memory.targets import _FUSED_QKV

_ROLES = {"q": ("q_proj", "query", "wq"), "k": ("k_proj", "key", "wk"), "v": ("v_proj", "value", "wv")}


class _Hold(torch.autograd.Function):
    """Identity on the attention output that keeps `held` until autograd reaches it, as SDPA keeps v."""

    @staticmethod
    def forward(ctx, x, held):
        ctx.save_for_backward(held)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class SharedDropout(torch.nn.Module):
    """One dropout for the projections of one block: a call on the input it last saw returns the same output."""

    def __init__(self, p: float):
        super().__init__()
        self.drop = torch.nn.Dropout(p)
        self._last: tuple = (None, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen, out = (ref() if ref is not None else None for ref in self._last)
        if seen is x and out is not None:
            return out
        out = self.drop(x)
        self._last = (weakref.ref(x), weakref.ref(out))
        return out


def _heads(cfg) -> tuple[int, int, int]:
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    return heads * head_dim, kv * head_dim, heads == kv


def apply_fused_qkv(model, cfg, qv_preset: bool) -> int:
    """Make each attention block of the (peft-wrapped) model hold what litgpt's fused projection holds; returns
    blocks changed. LoRA adapts the parts peft adapted (litgpt's lora_query/key/value); on an HF class with a
    fused projection, q and v when the targets were the `qv` preset (litgpt's default), else all three."""
    layers = decoder_layers(model, int(cfg.num_hidden_layers)) or []
    q_size, kv_size, mha = _heads(cfg)
    sizes = {"q": q_size, "k": kv_size, "v": kv_size}
    changed = 0
    for layer in layers:
        attn = next((m for m in layer.children() if type(m).__name__.endswith("Attention")), None)
        children = dict(attn.named_children()) if attn is not None else {}
        proj = {role: children[n] for role, names in _ROLES.items() for n in names if n in children}
        fused = next((m for n, m in children.items() if n in _FUSED_QKV), None)
        if len(proj) == 3:
            parts = {role for role, mod in proj.items() if hasattr(mod, "lora_A")}
            held = q_size + kv_size if mha else 0  # HF keeps v (GQA: litgpt's repeated k, v not held)
            shared = _share_dropout([proj[p] for p in sorted(parts)])
        elif fused is not None:  # the HF class keeps its own fused output as it does
            parts = ({"q", "v"} if qv_preset else set(sizes)) if hasattr(fused, "lora_A") else set()
            held, shared = 0, False
        else:
            continue
        if parts and parts != set(sizes):
            held += sum(sizes[p] for p in parts)
        if held:
            attn.register_forward_hook(lambda _m, _a, out, n=held: hold_activations(out, n))
        changed += bool(held or shared)
    return changed


def _share_dropout(layers: list) -> bool:
    """One SharedDropout in place of each adapter's dropouts in `layers` (peft lora_dropout ModuleDicts)."""
    drops = [lay.lora_dropout for lay in layers]
    shared = False
    for name in drops[0].keys() if len(drops) > 1 else ():
        p = getattr(drops[0][name], "p", 0.0)
        if p:
            one = SharedDropout(p)
            for d in drops:
                d[name] = one
            shared = True
    return shared


def hold_activations(out, n: int):
    """The attention output, now keeping `n` more activations per token (an empty tensor of the held parts' size)."""
    first = out[0] if isinstance(out, tuple) else out
    if not first.requires_grad:
        return out
    held = torch.empty(*first.shape[:-1], n, dtype=first.dtype, device=first.device)
    first = _Hold.apply(first, held)
    return (first, *out[1:]) if isinstance(out, tuple) else first
