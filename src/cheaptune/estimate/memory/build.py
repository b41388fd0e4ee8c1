"""Build the model as our trainer would, on meta, then swap its tensors for fake CPU tensors.

Order matters (docs/sources.md#memory-simulation): everything that changes module structure or dtypes
(peft, bitsandbytes replacement, gradient checkpointing) happens on meta, because Module._apply and
peft cannot handle FakeTensor parameters; only then are parameters swapped, keeping ties.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.layers import instantiate_on_meta
from cheaptune.estimate.memory.mechanisms import kbit_prep, mechanism
from cheaptune.estimate.memory.profiles import apply_model_quirks, get_profile
from cheaptune.estimate.policy import FUSED_HEAD_OUTPUTS, Policy, set_adapter_dtype


@dataclass
class Built:
    model: torch.nn.Module
    quantized: bool


def _peft_config(req, policy: Policy, model):
    import peft

    from cheaptune.estimate.memory.targets import resolve_targets, resolve_train_modules

    method = req.method
    if getattr(req, "peft_config", None):
        return peft_config_from_json(req.peft_config)
    if method in ("lora", "qlora", "dora"):
        targets = resolve_targets(model, req.lora_targets)
        saved = resolve_train_modules(model, req.train_modules) if getattr(req, "train_modules", None) else None
        return peft.LoraConfig(
            r=req.lora_r, lora_alpha=req.lora_alpha, lora_dropout=policy.lora_dropout,
            target_modules=targets, use_dora=method == "dora", task_type="CAUSAL_LM", modules_to_save=saved,
        )
    if method == "ia3":
        return peft.IA3Config(task_type="CAUSAL_LM")
    if method == "prompt_tuning":
        return peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=policy.virtual_tokens)
    if method == "prefix_tuning":
        return peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=policy.virtual_tokens)
    raise ValueError(method)


# fields of a saved PeftConfig that name where it came from, not what it builds
_PROVENANCE = ("base_model_name_or_path", "revision", "peft_version", "auto_mapping")


def peft_config_from_json(text: str):
    """The PeftConfig a saved adapter config describes (peft's own get_peft_config), for a causal LM."""
    import json

    import peft

    try:
        raw = {k: v for k, v in json.loads(text).items() if k not in _PROVENANCE}
        raw["task_type"] = raw.get("task_type") or "CAUSAL_LM"
        return peft.get_peft_config(raw)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise BadInput(f"PEFT config not usable with peft {peft.__version__}: {err}; pass a config saved by "
                       "PeftConfig.save_pretrained (adapter_config.json)") from None


def _untie_head(model) -> None:
    """Give the LM head its own weight where the HF class ties it to the embedding (the trainer's copy)."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and emb is not None and head.weight is emb.weight:
        head.weight = torch.nn.Parameter(torch.empty_like(emb.weight, device="meta"))
        model.config.tie_word_embeddings = False


def _replace_with_nf4(model, req, keep_head: bool = True) -> None:
    from transformers import BitsAndBytesConfig
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear

    qcfg = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=req.quant == "nf4-dq",
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    head = model.get_output_embeddings()
    skip = ([n for n, m in model.named_modules() if m is head] or ["lm_head"]) if keep_head else []
    replace_with_bnb_linear(model, modules_to_not_convert=skip, quantization_config=qcfg)
    model.is_loaded_in_4bit = True


def _plain_linears(model) -> None:
    """The trainer's own model code has plain torch.nn.Linear where the HF class has subclasses (FalconLinear):
    make them plain, so the 4-bit replacement (exact type nn.Linear only) quantizes them as the trainer does."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear) and type(mod) is not torch.nn.Linear and type(mod).__module__.startswith(
                "transformers."):
            mod.__class__ = torch.nn.Linear


# QLoRA is only QLoRA when bitsandbytes replaced (nearly) every block weight: falcon's FalconLinear and
# fused MoE experts (Mixtral) are skipped by transformers' 4-bit loader, which would leave a 16-bit base.
MIN_QUANTIZED_SHARE = 0.90


def check_quantized(model, label: str) -> None:
    """BadInput when the 4-bit loader left most block weights (2-D, not embeddings or head) in 16 bits.
    The trainer calls it on the loaded model too, so neither estimates nor trains a silent 16-bit QLoRA."""
    import bitsandbytes as bnb

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    skip = {id(p) for m in (base.get_input_embeddings(), base.get_output_embeddings()) if m is not None
            for p in m.parameters()}
    quant, kept = 0, {}
    for mod in base.modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            quant += mod.weight.numel() * (2 if mod.weight.dtype == torch.uint8 else 1)
            continue
        for p in mod.parameters(recurse=False):
            if id(p) not in skip and p.dim() >= 2:
                kept[type(mod).__name__] = kept.get(type(mod).__name__, 0) + p.numel()
    total = quant + sum(kept.values())
    if total and quant / total < MIN_QUANTIZED_SHARE:
        where = ", ".join(sorted(kept, key=kept.get, reverse=True)[:2])
        raise BadInput(f"qlora on {label}: bitsandbytes' 4-bit loader would leave {1 - quant / total:.0%} of the "
                       f"block weights in 16 bits ({where} are not replaced), so it would not be QLoRA; use "
                       "--method lora")


# the attribute a module carries when the trainer keeps it in host RAM: its weights are not counted on the GPU
ON_HOST = "_cheaptune_on_host"


def _trained_copies_as_unsloth(model, policy: Policy) -> None:
    """Unsloth's modules_to_save: the trained copy in its own 16-bit dtype (float32 where that is fp16), the frozen
    original moved to host RAM (unslothai/unsloth@015bdef0d94a241bcd94eec7a405b1700632180d models/llama.py L162-189
    _offload_frozen_module_for_training, called from get_peft_model L3209-3221)."""
    from peft.utils.other import ModulesToSaveWrapper

    half = policy.base_dtype if policy.base_dtype != torch.float16 else torch.float32
    for mod in model.modules():
        if isinstance(mod, ModulesToSaveWrapper):
            for copy in mod.modules_to_save.values():
                copy.to(dtype=half)
            setattr(mod.original_module, ON_HOST, True)


def build_on_meta(req, policy: Policy, cfg) -> Built:
    """Model with the method applied, still on meta; trainable flags as the trainer sets them."""
    model = instantiate_on_meta(cfg, policy.base_dtype, req.attn)
    apply_model_quirks(model, getattr(req, "trainer", None))
    profile = get_profile(getattr(req, "trainer", None))
    if profile.untied_head:
        _untie_head(model)
    quantized = req.method == "qlora"
    if quantized:
        if profile.all_linears_4bit:
            _plain_linears(model)
        _replace_with_nf4(model, req, keep_head=not profile.all_linears_4bit)
        check_quantized(model, cfg.model_type)
        if kbit_prep(req):
            import peft  # the trainer's own upcast: frozen 16-bit weights (embeddings, norms, head) to fp32

            peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if req.method != "full":
        import peft

        with torch.device("meta"):
            model = peft.get_peft_model(model, _peft_config(req, policy, model),
                                        autocast_adapter_dtype=policy.adapter_dtype == torch.float32)
        if policy.autocast is not None or policy.adapter == policy.base or quantized:
            set_adapter_dtype(model, policy)  # else no autocast: peft's own cast stands (LN tuning's norms stay 16-bit)
        if profile.train_modules_on_host:
            _trained_copies_as_unsloth(model, policy)
    if get_profile(getattr(req, "trainer", None)).fused_qkv and not getattr(req, "peft_config", None) \
            and req.method in ("full", "lora", "qlora"):
        from cheaptune.estimate.memory.fused_qkv import apply_fused_qkv

        apply_fused_qkv(model, cfg, qv_preset="qv" in req.lora_targets.split(","))
    if get_profile(getattr(req, "trainer", None)).fused_kernels and not getattr(req, "peft_config", None):
        from cheaptune.estimate.memory.unsloth_kernels import apply_unsloth_kernels

        apply_unsloth_kernels(model, cfg, policy.lora_dropout if req.method in ("lora", "qlora") else 0.0, req.attn)
    if req.grad_ckpt:
        # reentrant_ckpt (data/versions.yaml): transformers before #43203 ran torch's reentrant checkpointing; its
        # first forward is under no_grad, so nothing a layer keeps outside save_for_backward (bitsandbytes
        # < 0.43.2's ctx.tensors, simulate._keep_4bit_inputs) outlives the layer
        offload = get_profile(getattr(req, "trainer", None)).offload_ckpt
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": offload or mechanism(req, "reentrant_ckpt")},
            offload=offload)
        if req.method != "full":
            model.enable_input_require_grads()
    add_trainer_loss_head(model)
    return Built(model, quantized)


def add_trainer_loss_head(model) -> None:
    """trl's SFTTrainer loss: its chunked LM head on the (unwrapped) model, with the outputs it asks for.
    `model(..., fused_lm_head=True)` then returns per-token log-probs, never the full logits."""
    from trl.trainer.utils import add_fused_lm_head

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    add_fused_lm_head(base, outputs=FUSED_HEAD_OUTPUTS)


def _quantize_fake(mod, p, req):
    """Pitfall B of the note: Params4bit cannot wrap a FakeTensor, so attach bnb's attributes by hand."""
    import bitsandbytes.functional as bF

    w = torch.empty(p.shape, dtype=torch.bfloat16)
    dq = req.quant == "nf4-dq"
    w4, qs = bF.quantize_4bit(w, blocksize=64, compress_statistics=dq, quant_type="nf4", quant_storage=torch.uint8)
    newp = torch.nn.Parameter(w4, requires_grad=False)
    newp.blocksize, newp.compress_statistics, newp.quant_type, newp.quant_storage = 64, dq, "nf4", torch.uint8
    newp.quant_state, newp.bnb_quantized, newp.module = qs, True, mod
    mod.quant_state = qs
    return newp


def meta_to_fake(model, fake_mode, req, quantized: bool) -> None:
    """Swap every meta parameter/buffer for an uninitialised fake CPU tensor in place, keeping ties."""
    linear4 = None
    if quantized:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bF

        linear4 = bnb.nn.Linear4bit
        if not isinstance(bF.name2qmap.get("dynamic"), torch.Tensor) or bF.name2qmap["dynamic"].is_meta:
            dyn = bF.create_dynamic_map()  # pitfall A; a real run (validation) keeps the real table
            bF.name2qmap["dynamic"] = fake_mode.from_tensor(dyn) if hasattr(fake_mode, "from_tensor") else dyn
    memo: dict[int, torch.Tensor] = {}
    with fake_mode:
        for mod in model.modules():
            for n, p in list(mod._parameters.items()):
                if p is None:
                    continue
                if id(p) not in memo:
                    if linear4 is not None and isinstance(mod, linear4) and n == "weight":
                        memo[id(p)] = _quantize_fake(mod, p, req)
                    else:
                        memo[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype),
                                                         requires_grad=p.requires_grad)
                mod._parameters[n] = memo[id(p)]
            for n, b in list(mod._buffers.items()):
                if b is not None:
                    if id(b) not in memo:
                        memo[id(b)] = torch.empty(b.shape, dtype=b.dtype)
                    mod._buffers[n] = memo[id(b)]
    _fix_peft_prompt_tokens(model)


def _fix_peft_prompt_tokens(model) -> None:
    """peft keeps prompt-token index tensors outside parameters/buffers; make them ordinary CPU tensors."""
    tokens = getattr(model, "prompt_tokens", None)
    if isinstance(tokens, dict):
        for k, t in tokens.items():
            if t.is_meta:
                tokens[k] = torch.arange(t.numel(), dtype=t.dtype)


@contextlib.contextmanager
def quiet():
    """Silence warnings HF and peft print for meta/fake models (not the user's business)."""
    import warnings

    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
