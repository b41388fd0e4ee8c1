"""Other trainers' config files (Axolotl, LLaMA-Factory, litgpt YAML) as estimate and plan input.

Each reader maps every key that changes memory onto an EstimateRequest and its trainer profile, lists
the keys it ignored (they change nothing we estimate) and the keys it could not model, and refuses
unknown or contradictory keys with one line. The key lists live in data/foreign_keys.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean
from cheaptune.util.yamlfile import read_mapping

KEYS = Path(__file__).with_name("data") / "foreign_keys.yaml"
OPTIM = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "adamw": "adamw",
         "paged_adamw_32bit": "adamw", "adamw_bnb_8bit": "adamw-8bit", "adamw_8bit": "adamw-8bit",
         "paged_adamw_8bit": "paged-adamw-8bit", "adafactor": "adafactor", "sgd": "sgd",
         "torch.optim.AdamW": "adamw", "AdamW": "adamw", "torch.optim.SGD": "sgd", "SGD": "sgd"}
ATTN = {"flash_attention_2": "flash", "fa2": "flash", "sdpa": "sdpa", "eager": "eager", "disabled": "eager",
        "auto": "sdpa"}
LITGPT_TARGETS = {"lora_query": "q_proj", "lora_key": "k_proj", "lora_value": "v_proj",
                  "lora_projection": "o_proj", "lora_mlp": "mlp", "lora_head": "lm_head"}


@dataclass
class ForeignConfig:
    trainer: str
    request: dict[str, Any]  # EstimateRequest keyword arguments
    ignored: list[str] = field(default_factory=list)  # accepted, change nothing estimated
    named: list[str] = field(default_factory=list)  # change the run, not modelled


@cache
def _keys() -> dict:
    import yaml

    return yaml.safe_load(KEYS.read_text())


def readers() -> tuple[str, ...]:
    """The trainers whose config files are read here."""
    return tuple(_keys())


def time_keys(trainer: str) -> tuple[str, ...]:
    """Keys that change time and cost but not memory (read by plan --config)."""
    return tuple(_keys().get(trainer, {}).get("time", ()))


# Axolotl keys that pick the attention kernel, as cheaptune's `attn` (a true flag, or a kernel name)
ATTN_FLAGS = {"flash_attention": "flash", "sdp_attention": "sdpa", "eager_attention": "eager"}
# read for the estimate, but cheaptune's trainer does these its own way (trl's chunked loss, its checkpointing)
TRAINED_OWN_WAY = ("plugins", "liger_fused_linear_cross_entropy", "gradient_checkpointing_kwargs")


def for_train(raw: dict, known: set[str], where: str) -> tuple[dict, list[str], list[str]]:
    """An Axolotl config as `cheaptune train` and `doctor` read it: (keys to validate, ignored, named).

    Keys the trainer knows are kept (unknown ones too, so its did-you-mean reports them); the attention
    keys become `attn`; `bf16`/`fp16: auto` become unset (the policy's choice for the GPU, as Axolotl's
    auto); keys that change nothing are dropped as ignored; keys cheaptune trains differently are dropped
    and named, from the same key tables as the estimate's reader."""
    spec = _keys()["axolotl"]
    out: dict = {}
    ignored: list[str] = []
    named: list[str] = []
    asked: dict[str, str] = {}  # attention kernel per key that asks for one
    for key, value in raw.items():
        if key in ("bf16", "fp16") and value == "auto":
            continue
        if key in known:
            out[key] = value
        elif key == "attn_implementation" and value is not None:
            if str(value) not in ATTN:
                raise BadInput(f"{where}: attn_implementation {value!r} is not trained; use sdpa, eager or "
                               "flash_attention_2")
            asked[key] = ATTN[str(value)]
        elif key in ATTN_FLAGS or key == "attn_implementation":
            if value is True:
                asked[key] = ATTN_FLAGS[key]
        elif key in spec["ignored"] or key in spec.get("time", ()):
            ignored.append(key)
        elif key in spec["named"] or key in TRAINED_OWN_WAY:
            named.append(key)
        else:
            out[key] = value
    if "attn" in out:
        asked["attn"] = out["attn"]
    if len({repr(v) for v in asked.values()}) > 1:  # repr: a hand-edited `attn: []` is not hashable
        raise BadInput(f"{where}: {', '.join(f'{k} ({v})' for k, v in asked.items())} ask for different attention "
                       "kernels; keep one")
    if asked:
        out["attn"] = next(iter(asked.values()))
    return out, ignored, named


def detect(raw: dict) -> str | None:
    """The trainer whose config this is, by its keys (the one with the most detecting keys present)."""
    scores = {t: sum(k in raw for k in spec["detect"]) for t, spec in _keys().items()}
    best = max(scores, key=scores.get)
    return best if scores[best] >= 2 else None


def read_foreign_config(path: str | Path, trainer: str | None = None) -> ForeignConfig:
    raw = read_mapping(path, "config", "pass an Axolotl, LLaMA-Factory or litgpt YAML config")
    from cheaptune.estimate.memory.profiles import get_profile

    name = get_profile(trainer).name if trainer else detect(raw)
    if name not in _keys():
        raise BadInput(f"{path}: not an Axolotl, LLaMA-Factory or litgpt config (no base_model, "
                       "model_name_or_path or checkpoint_dir); pass --trainer axolotl|llama-factory|litgpt")
    mapped, req = {"axolotl": _axolotl, "llama-factory": _llama_factory, "litgpt": _litgpt}[name](raw, path)
    spec = _keys()[name]
    out = ForeignConfig(name, {**req, "trainer": name})
    from cheaptune.estimate.memory.versions import CONFIG_KEYS

    for key in raw:
        if key in mapped or key in CONFIG_KEYS:  # cheaptune's keys for the run's software: plan.config_run.config_pins
            continue
        if key in spec["named"]:
            out.named.append(key)
        elif key in spec["ignored"] or key in spec.get("time", ()):  # time keys: read by plan --config
            out.ignored.append(key)
        else:
            known = [*spec["ignored"], *spec.get("time", ()), *spec["named"], *mapped]
            raise BadInput(f"{path}: unknown {name} key {key!r}{did_you_mean(key, known)}; remove it or fix "
                           "its spelling")
    return out


def _need(raw: dict, key: str, path) -> Any:
    if raw.get(key) in (None, ""):
        raise BadInput(f"{path}: {key} is missing; set it to the model to train")
    return raw[key]


def _whole(value: Any, key: str, path) -> int:
    """A count read from the config (sequence length, micro-batch, rank): a whole number >= 1, else one line
    (NaN, a negative or a string reached the estimator's simulation as they were)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or not 1 <= value <= 2**31 \
            or value != int(value):
        raise BadInput(f"{path}: {key} must be a whole number >= 1 (got {value!r}); fix it in the config")
    return int(value)


def _fraction(value: Any, key: str, path) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise BadInput(f"{path}: {key} must be a number from 0 to below 1 (got {value!r}); fix it in the config")
    return float(value)


def _optim(value, path) -> str:
    if value is None:
        return "adamw"
    if isinstance(value, dict):  # litgpt: {class_path: torch.optim.AdamW, init_args: ...}
        value = value.get("class_path")
    if value not in OPTIM:
        raise BadInput(f"{path}: optimizer {value!r} is not estimated; use one of {', '.join(OPTIM)}")
    return OPTIM[value]


def _precision(bf16, fp16, path, pure_bf16: bool = False) -> str | None:
    if bf16 is True and fp16 is True:
        raise BadInput(f"{path}: bf16 and fp16 are both true; keep one")
    if pure_bf16:
        return "bf16-true"
    if fp16 is True:
        return "fp16-mixed"
    if bf16 is False and fp16 in (False, None):
        return "fp32"
    return None  # bf16: true | auto | unset: the trainer profile's default


AXOLOTL_MAPPED = frozenset({
    "base_model", "adapter", "load_in_4bit", "load_in_8bit", "lora_target_linear", "lora_target_modules",
    "flash_attention", "eager_attention", "attn_implementation", "sdp_attention", "plugins", "sequence_len",
    "micro_batch_size", "gradient_checkpointing", "gradient_checkpointing_kwargs", "bf16", "fp16", "optimizer",
    "liger_fused_linear_cross_entropy", "lora_r", "lora_alpha", "lora_dropout", "lora_modules_to_save"})


def axolotl_keys() -> frozenset[str]:
    """Every key the Axolotl reader knows (mapped, ignored, time, named): a key outside it is cheaptune's own."""
    spec = _keys()["axolotl"]
    return AXOLOTL_MAPPED | {*spec["ignored"], *spec.get("time", ()), *spec["named"], *TRAINED_OWN_WAY}


def _names(value, key: str, path) -> str | None:
    """A module-name list key (Axolotl's lora_modules_to_save list, LLaMA-Factory's additional_target string) as
    --train-modules takes it; None when unset."""
    if value in (None, "", []):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise BadInput(f"{path}: {key} must list module names (e.g. [embed_tokens, lm_head]); got {value!r}")
    return ",".join(i.strip() for i in items)


def _axolotl(raw: dict, path) -> tuple[set, dict]:
    adapter = raw.get("adapter")
    if raw.get("load_in_8bit") and raw.get("load_in_4bit"):
        raise BadInput(f"{path}: load_in_8bit and load_in_4bit are both true; keep one")
    if raw.get("load_in_8bit"):
        raise BadInput(f"{path}: load_in_8bit (an int8 base) is not estimated; use load_in_4bit with adapter: qlora")
    if adapter == "qlora" and not raw.get("load_in_4bit"):
        raise BadInput(f"{path}: adapter: qlora needs load_in_4bit: true")
    if adapter not in (None, "", "lora", "qlora"):
        raise BadInput(f"{path}: adapter {adapter!r} is not estimated; use lora or qlora, or none for full")
    method = "qlora" if raw.get("load_in_4bit") else (adapter or "full")
    targets = "all-linear" if raw.get("lora_target_linear") else ",".join(raw.get("lora_target_modules") or [])
    attn = ("flash" if raw.get("flash_attention") else "eager" if raw.get("eager_attention")
            else ATTN.get(str(raw.get("attn_implementation")), "sdpa"))
    plugins = " ".join(map(str, raw.get("plugins") or []))
    req = {"model": _need(raw, "base_model", path), "method": method,
           "seq_len": _whole(raw.get("sequence_len", 2048), "sequence_len", path),
           "micro_batch": _whole(raw.get("micro_batch_size", 1), "micro_batch_size", path),
           "grad_ckpt": bool(raw.get("gradient_checkpointing")),
           "precision": _precision(raw.get("bf16"), raw.get("fp16"), path),
           "optimizer": _optim(raw.get("optimizer"), path), "attn": attn,
           "loss": "trl" if "cut_cross_entropy" in plugins or raw.get("liger_fused_linear_cross_entropy") else None}
    if method != "full":
        req.update(lora_r=_whole(raw.get("lora_r", 8), "lora_r", path),
                   lora_alpha=_whole(raw.get("lora_alpha", 16), "lora_alpha", path),
                   lora_dropout=_fraction(raw.get("lora_dropout"), "lora_dropout", path), lora_targets=targets or "qv",
                   train_modules=_names(raw.get("lora_modules_to_save"), "lora_modules_to_save", path))
    return AXOLOTL_MAPPED, {k: v for k, v in req.items() if v is not None}


def _llama_factory(raw: dict, path) -> tuple[set, dict]:
    if raw.get("stage", "sft") not in ("sft", "pt"):
        raise BadInput(f"{path}: stage {raw['stage']!r} is not estimated; only sft and pt are")
    ftype, bits = raw.get("finetuning_type", "lora"), raw.get("quantization_bit")
    if ftype not in ("lora", "full"):
        raise BadInput(f"{path}: finetuning_type {ftype!r} is not estimated; use lora or full")
    if bits not in (None, 4):
        raise BadInput(f"{path}: quantization_bit {bits} is not estimated; use 4 (QLoRA) or none")
    if bits and ftype == "full":
        raise BadInput(f"{path}: quantization_bit needs finetuning_type: lora (a quantized model cannot be fully tuned)")
    method = "qlora" if bits else ftype
    target = str(raw.get("lora_target", "all"))
    rank = _whole(raw.get("lora_rank", 8), "lora_rank", path)
    req = {"model": _need(raw, "model_name_or_path", path), "method": method,
           "seq_len": _whole(raw.get("cutoff_len", 2048), "cutoff_len", path),
           "micro_batch": _whole(raw.get("per_device_train_batch_size", 8), "per_device_train_batch_size", path),
           "grad_ckpt": not raw.get("disable_gradient_checkpointing", False),
           "precision": _precision(raw.get("bf16"), raw.get("fp16"), path, bool(raw.get("pure_bf16"))),
           "optimizer": _optim(raw.get("optim"), path), "attn": ATTN.get(str(raw.get("flash_attn", "auto")), "sdpa")}
    if method != "full":
        req.update(lora_r=rank, lora_alpha=_whole(raw.get("lora_alpha") or 2 * rank, "lora_alpha", path),
                   lora_dropout=_fraction(raw.get("lora_dropout"), "lora_dropout", path),
                   lora_targets="all-linear" if target == "all" else target,
                   train_modules=_names(raw.get("additional_target"), "additional_target", path))
    mapped = {"model_name_or_path", "finetuning_type", "quantization_bit", "lora_target", "lora_rank", "lora_alpha",
              "additional_target",
              "lora_dropout", "cutoff_len", "per_device_train_batch_size", "disable_gradient_checkpointing", "bf16",
              "fp16", "pure_bf16", "optim", "flash_attn", "stage"}
    return mapped, {k: v for k, v in req.items() if v is not None}


def _litgpt(raw: dict, path) -> tuple[set, dict]:
    train = raw.get("train") or {}
    spec = _keys()["litgpt"]
    extra = set(train) - {"micro_batch_size", "max_seq_length"} - {*spec["ignored_train"], *spec["time_train"]}
    if extra:
        raise BadInput(f"{path}: unknown litgpt key train.{sorted(extra)[0]}; remove it or fix its spelling")
    if not train.get("max_seq_length"):
        raise BadInput(f"{path}: train.max_seq_length is unset (litgpt then uses the longest sample); set it")
    quant = raw.get("quantize")
    if quant not in (None, "bnb.nf4", "bnb.nf4-dq"):
        raise BadInput(f"{path}: quantize {quant!r} is not estimated; use bnb.nf4 or bnb.nf4-dq")
    precision = {"bf16-true": "bf16-true", "bf16-mixed": "bf16-mixed", "32-true": "fp32", None: None}
    if raw.get("precision") not in precision:
        raise BadInput(f"{path}: precision {raw['precision']!r} is not estimated; use bf16-true, bf16-mixed or 32-true")
    lora = any(k.startswith("lora_") for k in raw)
    targets = [name for key, name in LITGPT_TARGETS.items() if raw.get(key, key in ("lora_query", "lora_value"))]
    model = str(_need(raw, "checkpoint_dir", path)).removeprefix("checkpoints/")
    req = {"model": model, "method": ("qlora" if quant else "lora") if lora else "full",
           "seq_len": _whole(train["max_seq_length"], "train.max_seq_length", path),
           "micro_batch": _whole(train.get("micro_batch_size", 1), "train.micro_batch_size", path),
           "precision": precision[raw.get("precision")], "quant": quant.removeprefix("bnb.") if quant else None,
           "optimizer": _optim(raw.get("optimizer"), path), "gpus": _whole(1 if raw.get("devices") is None else raw["devices"], "devices", path)}
    if lora:
        req.update(lora_r=_whole(raw.get("lora_r", 8), "lora_r", path),
                   lora_alpha=_whole(raw.get("lora_alpha", 16), "lora_alpha", path),
                   lora_dropout=_fraction(raw.get("lora_dropout"), "lora_dropout", path),
                   lora_targets=",".join(targets) or "qv")
    mapped = {"checkpoint_dir", "train", "quantize", "precision", "optimizer", "devices", "lora_r", "lora_alpha",
              "lora_dropout", *LITGPT_TARGETS}
    return mapped, {k: v for k, v in req.items() if v is not None}


def request_for(config: str | None, trainer: str | None, given: dict[str, Any], rest: dict[str, Any]):
    """(EstimateRequest, ForeignConfig | None) from a config file and/or options: `given` are options
    left unset as None (an explicit one wins over the config), `rest` options that always have a value
    (the config wins over them)."""
    from cheaptune.estimate.memory.memory import EstimateRequest
    from cheaptune.estimate.memory.profiles import get_profile

    fc = read_foreign_config(config, trainer) if config else None
    explicit = {k: v for k, v in given.items() if v is not None}
    kwargs = {**rest, **(fc.request if fc else {"trainer": get_profile(trainer).name}), **explicit}
    missing = [f"--{k.replace('_', '-')}" for k in ("model", "method", "micro_batch", "seq_len") if k not in kwargs]
    if missing:
        raise BadInput(f"{', '.join(missing)} needed: pass them, or --config with a trainer's YAML config")
    profile = get_profile(kwargs["trainer"])  # what the trainer does when neither the options nor the config say
    kwargs.setdefault("lora_targets", profile.lora_targets)
    kwargs.setdefault("grad_ckpt", profile.grad_ckpt)
    return EstimateRequest(**kwargs), fc
