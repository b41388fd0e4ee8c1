"""Trainer profiles: the policy of each trainer users run (HF Trainer, Axolotl, LLaMA-Factory, litgpt,
torchtune), so the estimate simulates their step instead of ours.

The settings and their sources live in data/profiles.yaml; this module only reads them and turns one
into the `Policy` the simulator builds with. A setting a profile does not name is cheaptune's own
(estimate/policy.py), so the `cheaptune` profile is exactly what `cheaptune train` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import DEFAULT_PRECISION, LORA_DROPOUT

DATA = Path(__file__).parents[1] / "data" / "profiles.yaml"
DEFAULT_TRAINER = "cheaptune"
# bitsandbytes before 0.43.2 kept each 4-bit matmul's input for backward (ctx.tensors = (A, B)), although a
# frozen weight needs only grad_output @ W: bitsandbytes 0.41.0 bitsandbytes/autograd/_functions.py L523,
# fixed by commit 9e753741 "fix QLoRA mem bug: delete useless buffered activation" (#1270), first in 0.43.2.
BNB_KEEPS_INPUT_BEFORE = "0.43.2"


@dataclass(frozen=True)
class Profile:
    """One trainer's memory-relevant policy (see data/profiles.yaml for the meaning of each field)."""

    name: str
    about: str
    version: str = ""
    precision: dict[str, str] = field(default_factory=dict)
    loss: str = "trl"
    loss_chunk_tokens: int | None = None
    loss_chunks: int | None = None
    loss_fp32: bool = False
    loss_full_logits: bool = False
    loss_inplace: bool = False
    logits_config_dtype: bool = False
    lora_dropout: float = LORA_DROPOUT
    lora_targets: str = "all-linear"
    kbit_prep: bool = False
    qlora_adapter_dtype: str | None = None
    adapter_dtype: str | None = None
    grad_ckpt: bool = False
    mixed_fp32: bool = False
    fp32_outputs: bool = False
    fused_gelu: bool = False
    fused_qkv: bool = False
    fused_kernels: bool = False
    train_modules_on_host: bool = False
    all_linears_4bit: bool = False
    offload_ckpt: bool = False
    untied_head: bool = False
    foreach_adamw: bool = False
    fsdp_no_sync: bool = False
    quant_state_fp16: bool = False
    holds_last_outputs: bool = False
    not_simulated: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    package: str = ""  # the trainer's own package, whose version --trainer NAME==X names (estimate/memory/versions.py)
    release: str = ""  # the current release's version of `package` ("" for a library's own: the installed one)
    libraries: dict[str, str] = field(default_factory=dict)  # library -> specifier its current release pins
    releases: tuple[dict, ...] = ()  # older releases: {versions, libraries, source}

    def default_precision(self, method: str) -> str:
        return self.precision.get(method, DEFAULT_PRECISION[method])


@cache
def _profiles() -> dict[str, Profile]:
    import yaml

    raw = yaml.safe_load(DATA.read_text())
    out = {}
    for name, entry in raw["trainers"].items():
        settings = entry.get("settings") or {}
        values = {k: v["value"] for k, v in settings.items()}
        if "not_simulated" in values:
            values["not_simulated"] = tuple(values["not_simulated"])
        libs = entry.get("libraries") or {}
        sources = {k: v["source"] for k, v in settings.items()}
        if libs:
            sources["libraries"] = libs["source"]
        out[name] = Profile(name=name, about=entry["about"], version=entry.get("version", ""),
                            package=entry.get("package", ""), release=str(entry.get("release", "")), libraries=libs.get("value", {}),
                            releases=tuple(entry.get("releases") or ()), sources=sources, **values)
    return out


def trainers() -> tuple[str, ...]:
    return tuple(_profiles())


def get_profile(name: str | None) -> Profile:
    """The profile for a trainer name (`llama_factory`, `LLaMA-Factory` and `llamafactory` all accepted)."""
    key = (name or DEFAULT_TRAINER).split("==")[0].strip().lower().replace("_", "-")
    key = {"llamafactory": "llama-factory", "transformers": "hf", "trl": "hf"}.get(key, key)
    profiles = _profiles()
    if key not in profiles:
        raise BadInput(f"--trainer {name!r} is not one of {', '.join(profiles)}")
    return profiles[key]


# transformers' Python GELUs: each elementwise op keeps its own operand for backward (three extra tensors of
# the MLP width per token for NewGELUActivation), where torch's fused gelu keeps only its input
_PYTHON_GELUS = ("NewGELUActivation", "FastGELUActivation", "GELUTanh")


def apply_model_quirks(model, trainer: str | None) -> int:
    """Swap what the trainer's own model code runs differently from the HF class; returns modules swapped.

    fused_gelu: the trainer calls torch.nn.functional.gelu(approximate="tanh") where the HF class runs a
    Python tanh-GELU (phi's gelu_new), so the simulated block saves what the trainer's block saves."""
    if not get_profile(trainer).fused_gelu:
        return 0
    import torch

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ in _PYTHON_GELUS:
                setattr(parent, name, torch.nn.GELU(approximate="tanh"))
                swapped += 1
    return swapped
