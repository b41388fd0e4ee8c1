"""What a finished run leaves behind: adapter + tokenizer, training_summary.json, merged weights, samples."""

from __future__ import annotations

import json
import math
import resource
import sys
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.train.config import TrainConfig
from cheaptune.util import atomic

SUMMARY = "training_summary.json"
MERGED = "merged"
_MERGEABLE = ("lora", "qlora", "dora", "ia3")


def peak_memory() -> dict[str, int]:
    """Peak GPU memory allocated (CUDA) and this process's peak resident memory (Linux reports KiB)."""
    import torch

    out = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)}
    if torch.cuda.is_available():
        out["peak_gpu_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        out["peak_gpu_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    return out


def loss_history(log_history: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per logged step: train loss (and eval loss where evaluated), in step order."""
    out: dict[int, dict[str, float]] = {}
    for entry in log_history:
        step = entry.get("step")
        for key in ("loss", "eval_loss"):
            if step is not None and key in entry:
                out.setdefault(step, {"step": step})[key] = entry[key]
    return [out[s] for s in sorted(out)]


def write_summary(cfg: TrainConfig, state: Any, *, seconds: float, tokens_segment: int,
                  final_eval_loss: float | None, precision: str, extra: dict[str, Any]) -> dict[str, Any]:
    history = loss_history(state.log_history)
    train_losses = [h["loss"] for h in history if "loss" in h]
    summary = {
        "base_model": cfg.base_model,
        "method": cfg.method,
        "precision": precision,
        "steps": state.global_step,
        "max_steps": state.max_steps,
        "tokens": int(state.num_input_tokens_seen or 0),
        "seconds_this_segment": round(seconds, 3),
        "tokens_per_s": round(tokens_segment / seconds, 2) if seconds > 0 else None,
        # no step logged a loss (fewer steps than logging_steps): the Trainer's mean over the run
        "final_train_loss": train_losses[-1] if train_losses else _mean_train_loss(state.log_history),
        "final_eval_loss": final_eval_loss,
        "final_eval_perplexity": math.exp(final_eval_loss) if final_eval_loss is not None else None,
        "loss_history": history,
        **peak_memory(),
        **extra,
    }
    atomic.write_text(Path(cfg.output_dir) / SUMMARY, json.dumps(summary, indent=2))
    return summary


def _mean_train_loss(log_history: list[dict[str, Any]]) -> float | None:
    return next((e["train_loss"] for e in reversed(log_history) if e.get("train_loss") is not None), None)


def loss_text(loss: float | None) -> str:
    """A loss as people read it (4 significant digits), or why there is none."""
    return "not logged" if loss is None else f"{loss:.4g}"


def merge(cfg: TrainConfig, adapter_dir: Path, tokenizer: Any) -> Path:
    """Base weights + adapter as plain safetensors in the base's own dtype: LoRA/QLoRA shard by shard
    (cheaptune.export.merge, about one shard of RAM); DoRA/IA3 through peft with the base in its dtype."""
    if cfg.method not in _MERGEABLE:
        raise BadInput(f"--merge applies to adapter methods ({', '.join(_MERGEABLE)}), not {cfg.method}")
    from cheaptune.export.merge import copy_side_files, merge_shards
    from cheaptune.export.source import local_model_dir

    out = Path(cfg.output_dir) / MERGED
    base_dir = local_model_dir(str(cfg.base_model))
    with atomic.atomic_dir(out) as tmp:
        if cfg.method in ("lora", "qlora"):
            merge_shards(base_dir, adapter_dir, tmp)
            copy_side_files(base_dir, adapter_dir, tmp)
        else:
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype="auto", use_safetensors=True)
            PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload().save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return out


def generate_samples(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int) -> list[dict[str, str]]:
    """Greedy answers to each prompt, through the chat template when the tokenizer has one."""
    import torch

    if not prompts:
        return []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for prompt in prompts:
        if tokenizer.chat_template:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = prompt
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(device)
        with torch.no_grad():
            gen = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        answer = tokenizer.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        out.append({"prompt": prompt, "answer": answer})
    model.train(was_training)
    return out
