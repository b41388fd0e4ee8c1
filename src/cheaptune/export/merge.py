"""LoRA folded into the base weights one safetensors shard at a time, in each weight's stored dtype (or cast).

peft's `merge_and_unload` needs the whole model in memory (the old `train --merge` even reloaded it in
fp32: 4 bytes a parameter). Here each base shard is read, its targeted weights get W += s * B @ A
(computed in fp32, stored back in the weight's own 16-bit dtype), and the shard is written before the
next is read: peak memory is about one shard plus the adapter. Methods whose merge is more than
W + s*B@A (DoRA, IA3, modules_to_save) are refused with a pointer to peft.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
INDEX = "model.safetensors.index.json"
_ADAPTER_PREFIX = "base_model.model."


def base_shards(base_dir: Path) -> list[Path]:
    """The base model's safetensors files, in index order; BadInput when it has none."""
    index = base_dir / INDEX
    if index.is_file():
        names = dict.fromkeys(json.loads(index.read_text())["weight_map"].values())
        return [base_dir / n for n in names]
    single = base_dir / "model.safetensors"
    if single.is_file():
        return [single]
    raise BadInput(f"{base_dir} has no safetensors weights; convert the base to safetensors "
                   "(save_pretrained(..., safe_serialization=True)) and export again")


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """peft's rank_pattern/alpha_pattern lookup: a key matches the module name or a dotted suffix of it."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def lora_deltas(adapter_dir: Path) -> tuple[dict[str, tuple[Any, Any, float]], dict]:
    """{base weight key: (A, B, scale)} from a saved LoRA adapter, and its adapter_config."""
    from safetensors.torch import load_file

    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    kind = cfg.get("peft_type", "LORA")
    if kind != "LORA" or cfg.get("use_dora") or cfg.get("modules_to_save"):
        what = "DoRA" if cfg.get("use_dora") else "modules_to_save" if cfg.get("modules_to_save") else kind
        raise BadInput(f"shard-by-shard merge supports plain LoRA/QLoRA adapters, not {what}; merge with peft's "
                       "PeftModel.merge_and_unload() on a machine with RAM for the whole model")
    tensors = load_file(adapter_dir / "adapter_model.safetensors")
    pairs: dict[str, dict[str, Any]] = {}
    for key, t in tensors.items():
        m = re.fullmatch(r"(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key.removeprefix(_ADAPTER_PREFIX))
        if m is None:
            raise BadInput(f"{adapter_dir}: unexpected adapter tensor {key!r}; only lora_A/lora_B can be merged")
        pairs.setdefault(m.group(1), {})[m.group(2)] = t
    out = {}
    for module, ab in pairs.items():
        r = _pattern_value(cfg.get("rank_pattern") or {}, module, cfg["r"])
        alpha = _pattern_value(cfg.get("alpha_pattern") or {}, module, cfg["lora_alpha"])
        scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        out[f"{module}.weight"] = (ab["A"], ab["B"], scale)
    return out, cfg


def merge_shards(base_dir: Path, adapter_dir: Path, out_dir: Path, cast: str | None = None) -> dict[str, Any]:
    """Write the merged shards (same names, same index) into `out_dir`; returns what was merged and the
    dtypes of the floating-point weights written. `cast` (a torch dtype name, e.g. "bfloat16") stores every
    32/64-bit floating weight in it (a base saved in fp32 still exports as 16-bit); None keeps each dtype.

    Every adapter weight must find its base weight, else BadInput (the adapter is for another model).
    """
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    deltas, cfg = lora_deltas(adapter_dir)
    fan_in_fan_out = bool(cfg.get("fan_in_fan_out"))
    merged, dtypes = 0, set()
    wide = (torch.float32, torch.float64)
    target = getattr(torch, cast) if cast else None
    for shard in base_shards(base_dir):
        tensors = {}
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                t = f.get_tensor(key)
                if key in deltas:
                    a, b, scale = deltas.pop(key)
                    w = t.float()  # in place below: one fp32 copy of this weight at a time
                    if fan_in_fan_out:
                        w.addmm_(a.float().T, b.float().T, alpha=scale)
                    else:
                        w.addmm_(b.float(), a.float(), alpha=scale)
                    t = w.to(t.dtype)
                    del w
                    merged += 1
                    if not torch.isfinite(t).all():
                        raise BadInput(f"merging {key} gave non-finite values; the adapter is damaged")
                if target is not None and t.dtype in wide:
                    t = t.to(target)
                if t.is_floating_point():
                    dtypes.add(str(t.dtype).removeprefix("torch."))
                tensors[key] = t
        save_file(tensors, str(out_dir / shard.name), metadata={"format": "pt"})
        del tensors
    if deltas:
        raise BadInput(f"the adapter has weights the base lacks (e.g. {next(iter(deltas))}); "
                       "it was trained on another base model: pass that one with --base")
    if (base_dir / INDEX).is_file():
        shutil.copy2(base_dir / INDEX, out_dir / INDEX)
    return {"merged_weights": merged, "dtypes": sorted(dtypes)}


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


def set_config_dtype(out_dir: Path, dtype: str) -> None:
    """config.json names the dtype the weights are stored in (transformers 5 reads `dtype`, older `torch_dtype`)."""
    path = out_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg["dtype"] = dtype
    if "torch_dtype" in cfg:
        cfg["torch_dtype"] = dtype
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def copy_side_files(base_dir: Path, adapter_dir: Path, out_dir: Path) -> None:
    """config, generation config and tokenizer from the base, then the run's tokenizer files over them."""
    for p in base_dir.iterdir():
        if p.is_file() and not p.name.endswith(WEIGHT_SUFFIXES) and p.name != INDEX and not p.name.startswith("."):
            shutil.copy2(p, out_dir / p.name)
    for name in TOKENIZER_FILES:
        if (adapter_dir / name).is_file():
            shutil.copy2(adapter_dir / name, out_dir / name)
