"""Closed-form fallback for models the simulation cannot build (custom code, fake-tensor failures).

Deliberately pessimistic: every term is the upper end of what the simulation finds for Llama-like
blocks (docs/sources.md#simulation-vs-the-classic-formula), then a 15% margin, because under-estimating VRAM is the
expensive mistake.
"""

from __future__ import annotations

MARGIN = 1.15
_BYTES = {"bf16-true": 2, "bf16-mixed": 2, "fp16-mixed": 2, "fp32": 4}

# trl 1.16 SFTTrainer's fused LM head scores tokens in fp32 tiles (trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE = 32768 vocab entries; up to 4096 tokens per tile), read 2026-11-30.
TRL_CHUNK_TOKENS = 4096
TRL_CHUNK_VOCAB = 32768


def _dims(cfg: dict) -> tuple[int, int, int, int, int, int]:
    h = int(cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model") or 4096)
    L = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers") or 32)
    a = int(cfg.get("num_attention_heads") or cfg.get("n_head") or 32)
    kv = int(cfg.get("num_key_value_heads") or a) * (h // a)
    inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * h)
    v = int(cfg.get("vocab_size") or 32000)
    return h, L, a, kv, inter, v


def analytic_estimate(req, cfg: dict) -> dict:
    """Phase peaks, breakdown and parameter counts in the same shape as a simulation result."""
    h, L, a, kv, inter, v = _dims(cfg)
    b, s = req.micro_batch, req.seq_len
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter
    embed = v * h * (1 if cfg.get("tie_word_embeddings") else 2)
    total = L * per_layer + embed
    wb = _BYTES[req.precision]
    mixed = req.precision.endswith("-mixed")
    if req.method == "full":
        trainable = total
        weights = total * (4 if mixed else wb)
        per_trainable = (4 if mixed else wb) + (8 if mixed or wb == 4 else 2 * wb)
        frozen_weights, trainable_weights = 0, weights
    else:
        trainable = L * req.lora_r * (4 * h + 2 * kv + 3 * (h + inter)) + (20 * h if "tuning" in req.method else 0)
        quant = req.method == "qlora"
        frozen_weights = int(L * per_layer * (0.53 if quant else wb)) + embed * wb
        trainable_weights = trainable * 4
        per_trainable = 4 + 8
    grads_opt = trainable * per_trainable
    tok = b * s
    act_layer = tok * (2 * (6 * h + 2 * kv) + 8 * inter + (6 * a * s if req.attn == "eager" else 0))
    acts = tok * 2 * h * L + act_layer if req.grad_ckpt else act_layer * L
    # HF's loss holds ~14 B/token/vocab; trl's chunked head instead keeps fixed fp32 tiles of
    # [min(tokens, CHUNK_TOKENS), CHUNK_VOCAB] (x2 for the gradient) plus fp32 hidden-state copies.
    logits = 14 * tok * v
    if req.loss == "trl":
        logits = max(logits, 2 * min(tok, TRL_CHUNK_TOKENS) * TRL_CHUNK_VOCAB * 4 + 8 * tok * h)
    static = frozen_weights + trainable_weights
    fwd = static + grads_opt * 2 // 3 + acts + logits
    bwd = static + grads_opt + acts + logits
    opt = static + grads_opt + trainable * 4
    peaks = {k: int(x * MARGIN) for k, x in {"forward": fwd, "backward": bwd, "optimizer": opt}.items()}
    breakdown = {"weights": frozen_weights, "trainable_weights": trainable_weights,
                 "gradients": trainable * (4 if mixed else wb), "optimizer_state": grads_opt - trainable * (4 if mixed else wb),
                 "activations": acts, "logits_loss": logits}
    return {"phase_peaks": peaks, "breakdown": {k: int(v2) for k, v2 in breakdown.items() if v2},
            "trainable_params": int(trainable), "total_params": int(total + trainable * (req.method != "full"))}
