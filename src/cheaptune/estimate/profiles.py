"""Trainer profiles: the policy of each trainer users run (HF Trainer, Axolotl, LLaMA-Factory, litgpt,
torchtune), so the estimate simulates their step instead of ours.

The settings and their sources live in data/profiles.yaml; this module only reads them and turns one
into the `Policy` the simulator builds with. A setting a profile does not name is cheaptune's own
(estimate/policy.py), so the `cheaptune` profile is exactly what `cheaptune train` runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import DEFAULT_PRECISION, LORA_DROPOUT, Policy, resolve_policy

DATA = Path(__file__).with_name("data") / "profiles.yaml"
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
    not_simulated: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

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
        out[name] = Profile(name=name, about=entry["about"], version=entry.get("version", ""),
                            sources={k: v["source"] for k, v in settings.items()}, **values)
    return out


def trainers() -> tuple[str, ...]:
    return tuple(_profiles())


def get_profile(name: str | None) -> Profile:
    """The profile for a trainer name (`llama_factory`, `LLaMA-Factory` and `llamafactory` all accepted)."""
    key = (name or DEFAULT_TRAINER).lower().replace("_", "-")
    key = {"llamafactory": "llama-factory", "transformers": "hf", "trl": "hf"}.get(key, key)
    profiles = _profiles()
    if key not in profiles:
        raise BadInput(f"--trainer {name!r} is not one of {', '.join(profiles)}")
    return profiles[key]


def kbit_prep(req) -> bool:
    """Does the trainer keep peft's fp32 upcast of the frozen 16-bit weights in QLoRA (the request's own
    `kbit_prep` wins over the profile's, for a row run at an older version)?"""
    own = getattr(req, "kbit_prep", None)
    return get_profile(getattr(req, "trainer", None)).kbit_prep if own is None else own


def profile_policy(req) -> Policy:
    """The dtypes and dropout the request's trainer builds with: cheaptune's policy for the precision,
    then the profile's own choices (adapter dtypes, autocast after a kbit upcast, dropout)."""
    prof = get_profile(req.trainer)
    policy = resolve_policy(req.method, req.precision)
    dropout = prof.lora_dropout if req.lora_dropout is None else req.lora_dropout
    policy = dataclasses.replace(policy, lora_dropout=dropout)
    cast = getattr(req, "autocast_adapter_dtype", None)  # the request's own wins, as for kbit_prep
    if req.method not in ("full", "qlora") and (cast or (cast is None and prof.adapter_dtype)):
        policy = dataclasses.replace(policy, adapter=prof.adapter_dtype or "float32")  # peft's cast
    if prof.mixed_fp32 and policy.autocast is not None and req.method != "qlora":
        policy = dataclasses.replace(policy, base="float32", adapter="float32")  # every weight fp32, autocast
    if req.method == "qlora":
        if prof.qlora_adapter_dtype:
            policy = dataclasses.replace(policy, adapter=prof.qlora_adapter_dtype)
        if kbit_prep(req) and policy.autocast is None:  # fp32 norms/embeddings need autocast to run at all
            policy = dataclasses.replace(policy, autocast=policy.base)
    return policy


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


# peft before 0.21.0 ran OSF by rebuilding each adapted weight in every forward from SVD factors it kept as buffers
# (U_high [out,k], S_high [k], V_high [k,in] beside the base weight) and calling F.linear on the rebuilt weight, which
# autograd keeps for backward: peft@167fcb0f2 (Release 0.20.0) src/peft/tuners/osf/layer.py L85-103, L245-266 and
# utils.py reconstruct_weight_matrix. peft 0.21.0 replaced it by a factored low-rank forward (the locked version).
OSF_FACTORED_FROM = "0.21.0"


def apply_peft_version_quirks(model, peft_config: str | None) -> int:
    """Run the adapter as the peft version a saved config names (its `peft_version`) ran it, where that
    differs in memory from the installed peft; returns layers changed. Today: OSF before 0.21.0."""
    import json

    from packaging.version import InvalidVersion, Version

    raw = json.loads(peft_config) if peft_config else {}
    try:
        old = Version(str(raw.get("peft_version", "")).split("@")[0]) < Version(OSF_FACTORED_FROM)
    except InvalidVersion:
        return 0
    if raw.get("peft_type") != "OSF" or not old:
        return 0
    from peft.tuners.osf.layer import Linear as OsfLinear

    layers = [m for m in model.modules() if isinstance(m, OsfLinear)]
    for layer in layers:
        _rebuild_osf_layer(layer)
    return len(layers)


def _rebuild_osf_layer(layer) -> None:
    """Hold what peft < 0.21.0 held (the high-rank factors, no low-rank copies) and rebuild the weight per forward."""
    import types

    import torch
    from peft.tuners._buffer_dict import BufferDict

    ref = layer.get_base_layer().weight
    # peft's cast_adapter_dtype casts these BufferDicts with the adapter (fp32 under autocast_adapter_dtype,
    # peft@d787f51bb tuners_utils.py L2243-2290), so they take the trainable factors' dtype
    dtype = next(iter(layer.osf_svd_params.values()))["U_low"].dtype
    layer._detach_hooks()
    layer._osf_S_high = BufferDict({})
    for name, params in layer.osf_svd_params.items():
        out, inner, k = params["U_low"].shape[0], params["V_low"].shape[1], layer.effective_rank[name]
        layer._osf_U_high[name] = torch.zeros(out, k, dtype=dtype, device=ref.device)
        layer._osf_S_high[name] = torch.zeros(k, dtype=dtype, device=ref.device)
        layer._osf_V_high[name] = torch.zeros(k, inner, dtype=dtype, device=ref.device)
        for buffers in (layer._osf_U_low_init, layer._osf_S_low_init, layer._osf_V_low_init):
            buffers.pop(name)
        # peft's gradient projections, reading the buffers when they run (they are swapped for fake tensors later)
        layer.hook_handles += [
            params["U_low"].register_hook(lambda g, n=name: g - layer._osf_U_high[n] @ (layer._osf_U_high[n].T @ g)),
            params["V_low"].register_hook(lambda g, n=name: g - (g @ layer._osf_V_high[n].T) @ layer._osf_V_high[n])]
    layer.forward = types.MethodType(_osf_rebuilt_forward, layer)


def _osf_rebuilt_forward(self, x, *args, **kwargs):
    import torch.nn.functional as F

    name = self.active_adapters[0]
    p = self.osf_svd_params[name]
    weight = ((self._osf_U_high[name] * self._osf_S_high[name]) @ self._osf_V_high[name]
              + (p["U_low"] * p["S_low"]) @ p["V_low"])
    bias = self.get_base_layer().bias
    return F.linear(x.to(weight.dtype), weight, None if bias is None else bias.to(weight.dtype)).to(x.dtype)
