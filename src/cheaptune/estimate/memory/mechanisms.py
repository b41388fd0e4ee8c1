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


UNSLOTH_ROPE_START = 4 * 8192  # tokens its dynamic RoPE caches start at (data/versions.yaml unsloth_rope_full_length)


def resident_bytes(req, cfg: dict) -> int:
    """Bytes the trainer keeps on the GPU for the whole run beyond the model's weights: Unsloth's per-layer RoPE
    cos/sin caches before 2025.1.1 (data/versions.yaml unsloth_rope_per_layer), max_position_embeddings long (at
    least the sequence) before 2024.7 and at most UNSLOTH_ROPE_START after, fp32 in its Gemma class and 2 bytes
    (the compute dtype) in the others. 0 for every other run."""
    if not mechanism(req, "unsloth_rope_per_layer"):
        return 0
    heads = int(cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size") or 0) // heads)
    length = max(int(cfg.get("max_position_embeddings") or 0), req.seq_len)
    if not mechanism(req, "unsloth_rope_full_length"):  # grown in steps of 8192 past the start for a longer batch
        length = min(length, max(UNSLOTH_ROPE_START, -(-req.seq_len // 8192) * 8192))
    width = 4 if str(cfg.get("model_type", "")).startswith("gemma") else 2
    return int(cfg.get("num_hidden_layers") or 0) * 2 * length * head_dim * width
