"""--train-modules: whole modules trained beside a LoRA adapter (peft modules_to_save), as users train new tokens."""

from __future__ import annotations

import json

import pytest

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.time import throughput as tp


def _cfg_file(tmp_path, tiny_cfg) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**tiny_cfg.to_dict(), "tie_word_embeddings": False}))
    return str(path)


def _estimate(run_cli, cfg: str, *extra: str) -> dict:
    code, out, err = run_cli("estimate", "--model", cfg, "--method", "lora", "--micro-batch", "1", "--seq-len", "32",
                             "--lora-targets", "qv", "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_the_embedding_and_head_copies_are_trained_with_their_gradients_and_adamw_state(run_cli, tiny_cfg, tmp_path):
    cfg = _cfg_file(tmp_path, tiny_cfg)
    plain = _estimate(run_cli, cfg)
    both = _estimate(run_cli, cfg, "--train-modules", "embed_tokens,lm_head")
    each = tiny_cfg.vocab_size * tiny_cfg.hidden_size
    assert both["trainable_params"] - plain["trainable_params"] == 2 * each
    # a trained fp32 copy of each (the frozen originals stay), its fp32 gradient, and AdamW's two fp32 moments
    assert both["peak_allocated_bytes"] - plain["peak_allocated_bytes"] >= 2 * each * 4 * 3


@pytest.mark.parametrize("extra, says", [
    (("--train-modules", "wte"), "'wte' (--train-modules, lora_modules_to_save) is not a module of this model"),
    (("--train-modules", ","), "--train-modules (lora_modules_to_save) is empty"),
    (("--method", "full", "--train-modules", "lm_head"), "needs an adapter method"),
])
def test_a_bad_train_modules_value_is_one_line_and_exit_2(run_cli, tiny_cfg, tmp_path, extra, says):
    code, out, err = run_cli("estimate", "--model", _cfg_file(tmp_path, tiny_cfg), "--method", "lora",
                             "--micro-batch", "1", "--seq-len", "32", *extra)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and not out


def test_unsloth_keeps_the_frozen_originals_in_host_ram(tiny_cfg):
    """Unsloth moves the frozen embedding and head to the CPU once their trained copies exist: the GPU holds the
    copies only, so its weights are smaller than the HF stack's by both originals (16-bit each)."""
    cfg = {**tiny_cfg.to_dict(), "tie_word_embeddings": False}
    kw = dict(model=cfg, method="lora", micro_batch=1, seq_len=32, lora_targets="qv", precision="bf16-mixed",
              train_modules="embed_tokens,lm_head", lora_dropout=0.0, grad_ckpt=False)
    hf = estimate_memory(EstimateRequest(**kw, trainer="hf")).breakdown["weights"]
    unsloth = estimate_memory(EstimateRequest(**kw, trainer="unsloth")).breakdown["weights"]
    assert hf - unsloth == 2 * tiny_cfg.vocab_size * tiny_cfg.hidden_size * 2


def test_the_step_time_counts_the_head_as_a_weight_gradient_and_both_in_the_optimizer(tiny_cfg):
    """estimate --gpu with --train-modules times the job bench's way (Job.saved_params): the trained copies add
    no forward, the head adds its weight gradient, both take an AdamW step."""
    from cheaptune.catalog.gpus import resolve_gpu

    cfg = tiny_cfg.to_dict()
    each = cfg["vocab_size"] * cfg["hidden_size"]
    assert tp.trained_module_params(cfg, "embed_tokens,lm_head") == (2 * each, each)
    assert tp.trained_module_params(cfg, "lm_head") == (each, each) and tp.trained_module_params(cfg, None) == (0, 0)
    req = EstimateRequest(model=cfg, method="lora", micro_batch=1, seq_len=32, train_modules="embed_tokens,lm_head")
    lora = 10_000
    gpu = resolve_gpu("A100")
    timed = tp.step_time_for(req, lora + 2 * each, gpu)
    plain = tp.step_time_for(EstimateRequest(model=cfg, method="lora", micro_batch=1, seq_len=32), lora, gpu)
    assert timed.flops_per_token - plain.flops_per_token == pytest.approx(2 * each)
    assert timed.parts["optimizer"] == pytest.approx(plain.parts["optimizer"] * (lora + 2 * each) / lora)
