"""LoRA target presets (qv, attention, mlp, all-linear, + lm_head) mapped to each architecture's own names.

Shared by the estimator and the trainer so both adapt exactly the same modules. Names are discovered
from the model itself (a 1-layer copy built on meta), so fused projections such as phi3 `qkv_proj`
or falcon/gpt_neox `query_key_value` are found without a per-family table.
"""

from __future__ import annotations

from cheaptune.errors import BadInput

PRESETS = ("qv", "attention", "mlp", "all-linear", "lm_head")
# --train-modules names for the two modules users train whole beside an adapter (new tokens' rows), whatever the
# architecture calls them: its input embedding and its output head (get_input/output_embeddings)
TRAIN_MODULE_ALIASES = ("embed_tokens", "lm_head")
_Q_V = {"q_proj", "v_proj", "query", "value", "q", "v", "wq", "wv"}
_FUSED_QKV = {"qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv", "W_pack", "wqkv"}
_ATTN_HINTS = ("attn", "attention")
_MLP_HINTS = ("mlp", "feed_forward", "ffn", "experts", "moe")


def _linear_layers(model) -> tuple[dict[str, str], str | None]:
    """Leaf name -> role ('attention', 'mlp' or 'other') for every Linear in the blocks; and the head name."""
    import torch
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    roles: dict[str, str] = {}
    head_name = None
    for path, mod in model.named_modules():
        if not isinstance(mod, (torch.nn.Linear, Conv1D)):
            continue
        leaf = path.rsplit(".", 1)[-1]
        if mod is head:
            head_name = leaf
            continue
        parents = path.lower().split(".")[:-1]
        if any(h in p for p in parents for h in _ATTN_HINTS):
            role = "attention"
        elif any(h in p for p in parents for h in _MLP_HINTS):
            role = "mlp"
        else:
            role = "other"
        roles.setdefault(leaf, role)
    return roles, head_name


def _one_layer_model(config):
    import copy

    from cheaptune.estimate.memory.layers import instantiate_on_meta, set_layer_count

    cfg = copy.deepcopy(config)
    set_layer_count(cfg, min(getattr(cfg, "num_hidden_layers", 1) or 1, 2))
    return instantiate_on_meta(cfg)


def resolve_targets(model_or_config, spec: str | list[str]) -> list[str]:
    """Module leaf names for peft's `target_modules` from presets and/or names ("all-linear,lm_head")."""
    import torch

    model = model_or_config if isinstance(model_or_config, torch.nn.Module) else _one_layer_model(model_or_config)
    roles, head = _linear_layers(model)
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not items:
        raise BadInput("--lora-targets is empty; use a preset (qv, attention, mlp, all-linear) or module names")
    out: list[str] = []
    for item in items:
        if item == "all-linear":
            out += list(roles)
        elif item == "attention":
            out += [n for n, r in roles.items() if r == "attention"]
        elif item == "mlp":
            out += [n for n, r in roles.items() if r == "mlp"]
        elif item == "qv":
            qv = [n for n in roles if n in _Q_V] or [n for n in roles if n in _FUSED_QKV]
            out += qv
        elif item == "lm_head" and head:
            out.append(head)
        elif item in roles or item == head:
            out.append(item)
        else:
            valid = ", ".join([*PRESETS[:4], *sorted(roles), *([head] if head else [])])
            raise BadInput(f"unknown LoRA target {item!r} for this model; valid: {valid}")
    if not out:
        raise BadInput(f"LoRA targets {spec!r} match no Linear layer in this model; try all-linear")
    return sorted(dict.fromkeys(out))


def resolve_train_modules(model_or_config, spec: str) -> list[str]:
    """Module leaf names for peft's `modules_to_save` (trained whole, a copy beside the frozen original) from
    'embed_tokens,lm_head' (this model's input embedding and head, whatever it names them) or module names."""
    import torch

    model = model_or_config if isinstance(model_or_config, torch.nn.Module) else _one_layer_model(model_or_config)
    found = dict(zip(TRAIN_MODULE_ALIASES, (model.get_input_embeddings(), model.get_output_embeddings()), strict=True))
    leaf = {mod: path.rsplit(".", 1)[-1] for path, mod in model.named_modules() if path}
    names = {path.rsplit(".", 1)[-1] for path, _ in model.named_modules() if path}
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        mod = found.get(item)
        if mod is not None and mod in leaf:
            out.append(leaf[mod])
        elif item in names:
            out.append(item)
        else:
            raise BadInput(f"train module {item!r} (--train-modules, lora_modules_to_save) is not a module of this "
                           "model; use embed_tokens, lm_head or a module name of the model")
    if not out:
        raise BadInput("--train-modules (lora_modules_to_save) is empty; name embed_tokens, lm_head or module names, "
                       "or leave it out")
    return sorted(dict.fromkeys(out))
