"""What a request's trainer run does at its versions: its profile (data/profiles.yaml) joined with the
version-dependent mechanisms (data/versions.yaml).

Why its own module: versions reads the profiles to know each trainer's pins, so what needs both a profile
and its versions sits above both.
"""

from __future__ import annotations

import dataclasses

from cheaptune.estimate.memory.profiles import get_profile
from cheaptune.estimate.memory.versions import join_pins, parse_pins, resolve, split_trainer
from cheaptune.estimate.policy import Policy, resolve_policy


def mechanism(req, name: str) -> bool:
    """Does the request's run have version-dependent mechanism `name` (data/versions.yaml) at its versions?"""
    prof, (_, own) = get_profile(req.trainer), split_trainer(req.trainer)
    pins = getattr(req, "versions", None)
    if own and prof.package:  # a request not normalized yet: litgpt==0.4.9
        pins = join_pins({**parse_pins(pins), prof.package: own})
    return resolve(prof.name, pins, req.method).flags.get(name, False)


def kbit_prep(req) -> bool:
    """Does the trainer keep peft's fp32 upcast of the frozen 16-bit weights in QLoRA (its profile, or an
    Axolotl release before the cast back)?"""
    return get_profile(getattr(req, "trainer", None)).kbit_prep or mechanism(req, "kbit_prep_kept")


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
