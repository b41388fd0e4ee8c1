"""Model catalog: architecture facts (config.json fields) by hub id, alias, local file or directory.

The estimators need the exact architecture, not a marketing size: memory and FLOPs follow from
hidden sizes, GQA head counts, vocabulary and tied embeddings. The catalog is bundled so planning
works offline; anything else comes from a local config.json or, when online, the hub.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import socket
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cheaptune.catalog import DATA_DIR, file_version, load_rows
from cheaptune.errors import BadInput
from cheaptune.util.files import read_text
from cheaptune.util.hub import offline
from cheaptune.util.names import suggest

MODELS_FILE = DATA_DIR / "models.yaml"
REQUIRED_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """A model's identity and architecture; `config` holds config.json fields."""

    id: str
    family: str
    config: dict[str, Any] = field(hash=False)
    aliases: tuple[str, ...] = ()
    source: str = "local"
    checked: str = ""
    source_date: str = ""
    read: str = ""

    @cached_property
    def params(self) -> int:
        return count_params(self.config)

    @property
    def context_length(self) -> int:
        c = self.config
        n = c.get("max_position_embeddings") or c.get("n_positions")
        return int(n) if n else _default_context(self)


def _default_context(spec: ModelSpec) -> int:
    """The context transformers gives a config that leaves it out (falcon's config.json does), cached on disk
    per model type and transformers version: building the config imports torch (about 4 s each `models`)."""
    from importlib import metadata

    from cheaptune.util import jsoncache

    key = re.sub(r"[^\w.-]", "_", f"{spec.config['model_type']}-{metadata.version('transformers')}")
    return jsoncache.cached("model_defaults", key, lambda: int(to_hf_config(spec).max_position_embeddings),
                            decode=lambda d: int(d["max_position_embeddings"]),
                            encode=lambda n: {"max_position_embeddings": n})


class _Row(BaseModel):
    """One catalog entry as written in models.yaml (validated on load)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    family: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    source: str = Field(pattern=r"^https://")
    checked: str = Field(min_length=1)
    source_date: str = Field(pattern=r"^(\d{4}-\d{2}-\d{2}|undated)$")
    read: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    config: dict[str, Any]

    @field_validator("config")
    @classmethod
    def _has_fields(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        missing = [f for f in REQUIRED_FIELDS if f not in cfg]
        if missing:
            raise ValueError(f"config lacks {', '.join(missing)}")
        wrong = shape_problem(cfg)
        if wrong:
            raise ValueError(wrong)
        return cfg


def shape_problem(cfg: dict[str, Any]) -> str | None:
    """What is wrong with the fields every estimate reads (REQUIRED_FIELDS), all present: a model_type that is no
    name, or a size that is no positive whole number (`"hidden_size": "64"`, `64.5`, `true`, `0` each ended in a
    traceback from transformers or an estimate of a model with no layers); None when they are sound."""
    if not isinstance(cfg["model_type"], str) or not cfg["model_type"].strip():
        return f"config.model_type must be a model type name like \"llama\" (got {cfg['model_type']!r})"
    for f in REQUIRED_FIELDS[1:]:
        if isinstance(cfg[f], bool) or not isinstance(cfg[f], int) or cfg[f] <= 0:
            return f"config.{f} must be a positive integer (got {cfg[f]!r})"
    return None


def _load(path: Path) -> tuple[ModelSpec, ...]:
    return _load_version(path, file_version(path))


@lru_cache(maxsize=8)
def _load_version(path: Path, version: tuple[int, int]) -> tuple[ModelSpec, ...]:
    rows = load_rows(path, "models", _Row, "id")
    specs = tuple(ModelSpec(**r.model_dump()) for r in rows)
    seen: dict[str, str] = {}
    for s in specs:
        for key in _keys(s):
            if seen.setdefault(key, s.id) != s.id:
                raise BadInput(f"{path}: entry {s.id!r}: name {key!r} is already used by {seen[key]!r}")
    return specs


def _keys(spec: ModelSpec) -> set[str]:
    """Every lower-case name that selects this entry: hub id, the part after '/', aliases."""
    return {spec.id.lower(), spec.id.split("/")[-1].lower(), *(a.lower() for a in spec.aliases)}


def list_models(family: str | None = None, path: Path | None = None) -> list[ModelSpec]:
    """Catalog entries in file order, optionally one family (case-insensitive)."""
    specs = _load(Path(path or MODELS_FILE))
    return [s for s in specs if family is None or s.family.lower() == family.lower()]


def read_config(path: Path) -> dict[str, Any]:
    """A config.json as a dict; any defect is one BadInput line naming the file."""
    text = read_text(path, "model config", "pass a model's config.json or its folder")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadInput(f"{path}: not valid JSON ({err}); pass a model's config.json") from None
    if not isinstance(cfg, dict):
        raise BadInput(f"{path}: expected a JSON object of config fields, got {type(cfg).__name__}")
    if "text_config" in cfg and "hidden_size" not in cfg:
        raise BadInput(f"{path}: multimodal config (fields under text_config) is not supported; pass a text model")
    missing = [f for f in REQUIRED_FIELDS if f not in cfg]
    if missing:
        raise BadInput(f"{path}: config lacks {', '.join(missing)}; is this a decoder LLM's config.json?")
    wrong = shape_problem(cfg)
    if wrong:
        raise BadInput(f"{path}: {wrong}; fix config.json")
    return cfg


def _local(path: Path) -> ModelSpec:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise BadInput(f"{path}: no config.json in this folder; pass a model directory or its config.json")
    cfg = read_config(file)
    return ModelSpec(id=str(path), family=str(cfg["model_type"]), config=cfg, source="local")


HUB_PROBE_TIMEOUT_S = 3.0  # a reachable hub answers a TCP connect well within this

# Suffixes of chat/instruct releases that keep their base model's architecture (config fields).
_VARIANT_SUFFIXES = re.compile(r"[-_](instruct|chat|it)(?=$|[-_])", re.IGNORECASE)


def _hub_config(repo_id: str) -> Path:
    """config.json from the local HF cache, else from the hub; fails fast when the hub is unreachable
    (huggingface_hub would otherwise retry for about half a minute)."""
    from huggingface_hub import constants, hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, "config.json", local_files_only=True))
    except Exception:  # not cached: go online
        pass
    host = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((host.hostname, host.port or 443), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise ConnectionError(f"hub unreachable: {err}") from None
    return Path(hf_hub_download(repo_id, "config.json"))


def _base_variant(repo_id: str, specs: list[ModelSpec]) -> ModelSpec | None:
    """The catalog entry whose architecture an instruct/chat release shares (e.g. X-Instruct -> X)."""
    base = _VARIANT_SUFFIXES.sub("", repo_id).lower()
    for spec in specs:
        if base != repo_id.lower() and base in _keys(spec):
            return dataclasses.replace(spec, id=repo_id, source=f"architecture of {spec.id} ({spec.source})")
    return None


def _from_hub(repo_id: str, close: list[str], specs: list[ModelSpec]) -> ModelSpec:
    """Fetch only config.json; no weights, no remote code. Offline, an instruct/chat variant of a
    catalog model uses its base's architecture (same config fields)."""
    nearby = f"; close catalog entries: {', '.join(close)}" if close else ""
    how = "pass a local config.json or model directory"
    try:
        if offline():
            raise ConnectionError("HF_HUB_OFFLINE is set")
        file = _hub_config(repo_id)
    except Exception as err:  # network, auth, missing repo: all mean "cannot get it now"
        variant = _base_variant(repo_id, specs)
        if variant is not None:
            return variant
        why = "HF_HUB_OFFLINE is set" if offline() else f"cannot fetch config.json ({type(err).__name__})"
        raise BadInput(f"model {repo_id!r} is not in the catalog and {why}; {how}{nearby}") from None
    cfg = read_config(file)
    return ModelSpec(id=repo_id, family=str(cfg["model_type"]), config=cfg, source=f"https://huggingface.co/{repo_id}")


def resolve_model(name_or_path: str | os.PathLike, path: Path | None = None) -> ModelSpec:
    """A catalog entry (hub id any case, alias), a local config.json or model dir, or a hub id online."""
    raw = str(name_or_path).strip()
    local = Path(raw).expanduser()
    try:
        found = local.exists()
    except OSError:  # a name too long for the file system is not a local path
        found = False
    if found:
        return _local(local)
    specs = _load(Path(path or MODELS_FILE))
    low = raw.lower()
    for spec in specs:
        if low in _keys(spec):
            return spec
    names = [s.id for s in specs] + [a for s in specs for a in s.aliases]
    close = suggest(raw, names) or suggest(raw.split("/")[-1], names)
    if raw.endswith(".json") or raw.startswith((".", "/", "~")) or os.sep + os.sep in raw:
        raise BadInput(f"{raw}: no such file or directory")
    if raw.count("/") == 1 and all(raw.split("/")):
        return _from_hub(raw, close, specs)
    hint = f" (did you mean {', '.join(close)}?)" if close else "; run `cheaptune models` for the list"
    shown = raw if len(raw) <= 120 else f"{raw[:60]}...{raw[-60:]}"
    raise BadInput(f"unknown model {shown!r}{hint}")


def loadable_name(name_or_path: str | os.PathLike, spec: ModelSpec) -> str:
    """What `from_pretrained` can load for what the user typed: a local folder as an absolute path, a
    hub id as typed (an instruct variant planned on its base's architecture keeps its own id), and a
    catalog alias as the catalog's hub id."""
    raw = str(name_or_path).strip()
    local = Path(raw).expanduser()
    if local.exists():
        return str((local if local.is_dir() else local.parent).resolve())
    if raw.count("/") == 1 and all(raw.split("/")) and raw.lower() != spec.id.lower():
        return raw
    return spec.id


def to_hf_config(spec: ModelSpec, **overrides: Any):
    """A transformers PretrainedConfig for building the model (never with remote code)."""
    from transformers import AutoConfig

    # a deep copy: transformers edits nested fields (rope_scaling) in place, which would change the
    # catalog entry and every cache key derived from it
    fields = {k: copy.deepcopy(v) for k, v in spec.config.items() if k not in ("model_type", "auto_map")}
    fields.update(overrides)
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its checks of fields a size does not read (a default bos id past a small
    from huggingface_hub.errors import StrictDataclassError

    try:  # vocabulary: gpt_bigcode's) printed lines under `cheaptune models`
        return AutoConfig.for_model(spec.config["model_type"], **fields)
    except (ValueError, KeyError) as err:
        raise BadInput(f"model {spec.id!r}: transformers cannot build model_type "
                       f"{spec.config['model_type']!r} ({err}); upgrade transformers or pick another model") from None
    except (StrictDataclassError, TypeError, AttributeError) as err:  # its config classes check each field
        raise BadInput(f"model {spec.id!r}: transformers refuses its config ({' '.join(str(err).split())}); "
                       "fix config.json") from None
    finally:
        hf_logging.set_verbosity(level)


# Per model_type: gated MLP, LayerNorm (with bias) instead of RMSNorm, norms per layer, biases, tying
# default. Families not listed are counted by building the model on the meta device.
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {}, "mistral": {}, "mixtral": {}, "qwen2": {"qkv_bias": True},
    "gemma": {"tie": True}, "gemma2": {"tie": True, "norms": 4}, "phi3": {},
    "stablelm": {"ln": True},
    "phi": {"gated": False, "ln": True, "norms": 1, "qkv_bias": True, "o_bias": True, "mlp_bias": True,
            "head_bias": True},
    "gpt_neox": {"gated": False, "ln": True, "qkv_bias": True, "o_bias": True, "mlp_bias": True},
}


def count_params(config: dict[str, Any]) -> int:
    """Parameter count from config fields (tied embeddings counted once), analytic per family."""
    c = config
    mt = c["model_type"]
    if mt == "falcon":
        return _falcon_params(c)
    if mt not in _FAMILIES:
        return _meta_params(c)
    t = {"gated": True, "ln": False, "norms": 2, "qkv_bias": False, "o_bias": False, "mlp_bias": False,
         "head_bias": False, "tie": False, **_FAMILIES[mt]}
    h, n_layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or h // heads
    qkv_bias = c.get("use_qkv_bias", c.get("attention_bias", t["qkv_bias"]))
    o_bias = c.get("attention_bias", t["o_bias"]) if mt != "stablelm" else False
    mlp_bias = c.get("mlp_bias", t["mlp_bias"])
    inter = c.get("intermediate_size") or 4 * h
    attn = h * hd * (2 * heads + 2 * kv) + qkv_bias * hd * (heads + 2 * kv) + o_bias * h
    n_in = 2 if t["gated"] else 1  # gated MLPs have gate and up projections
    mlp = (n_in + 1) * h * inter + mlp_bias * (n_in * inter + h)
    experts = c.get("num_local_experts")
    if experts:
        mlp = experts * mlp + h * experts
    norm = 2 * h if t["ln"] else h
    norms = 1 if c.get("use_parallel_residual") and mt == "stablelm" else t["norms"]
    if c.get("qk_layernorm"):
        attn += (heads + kv) * hd
    layer = attn + mlp + norms * norm
    tied = c.get("tie_word_embeddings", t["tie"])
    head = 0 if tied else vocab * h + t["head_bias"] * vocab
    return n_layers * layer + vocab * h + norm + head


def _falcon_params(c: dict[str, Any]) -> int:
    """Falcon: fused QKV (multi-query in 7B, grouped in 40B), 4h MLP, LayerNorms, tied head."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    hd = h // heads
    if c.get("new_decoder_architecture"):
        kv = c.get("num_kv_heads") or heads
        norms = c.get("num_ln_in_parallel_attn") or 2
    else:
        kv = 1 if c.get("multi_query", True) else heads
        norms = 1 if c.get("parallel_attn", True) else 2
    bias = bool(c.get("bias", False))
    inter = c.get("ffn_hidden_size") or 4 * h
    attn = h * hd * (heads + 2 * kv) + bias * hd * (heads + 2 * kv) + h * h + bias * h
    mlp = 2 * h * inter + bias * (inter + h)
    layer = attn + mlp + norms * 2 * h
    head = 0 if c.get("tie_word_embeddings", True) else c["vocab_size"] * h
    return c["num_hidden_layers"] * layer + c["vocab_size"] * h + 2 * h + head


def _meta_params(config: dict[str, Any]) -> int:
    """Exact count for any architecture transformers knows: build it on the meta device (no memory). Kept on disk
    by config and transformers version, so `models` and a warm `plan` do not import torch for it every time."""
    from importlib import metadata

    from cheaptune.util import jsoncache

    key = jsoncache.digest({"config": config, "transformers": metadata.version("transformers")})
    return jsoncache.cached("params", key, lambda: _count_on_meta(config), decode=int)


def _count_on_meta(config: dict[str, Any]) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    spec = ModelSpec(id=str(config.get("_name_or_path", "config")), family=config["model_type"], config=config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(to_hf_config(spec))
    return sum(p.numel() for p in model.parameters())
