"""The DPO demo's yardstick: how much more log-probability a model gives the chosen reply than the rejected one.

DPO's loss is a function of exactly this margin (policy minus reference), so the margin on held-out pairs
rising after training is the visible sign that preference tuning worked. Sums are over the reply's tokens
only, with prompt and reply tokenized apart, as trl's DPOTrainer does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput


def read_pairs(path: Path) -> list[dict]:
    """Conversational preference rows (prompt / chosen / rejected as turn lists) from a JSONL file."""
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise BadInput(f"cannot read the held-out pairs {path}: {err}; pass a JSONL file of preference rows") from None
    if not rows or not all(isinstance(r, dict) and {"prompt", "chosen", "rejected"} <= set(r) for r in rows):
        raise BadInput(f"{path}: every row needs prompt, chosen and rejected turn lists")
    return rows


def reply_logp(model: Any, tokenizer: Any, prompt: list[dict], reply: list[dict]) -> float:
    """Sum of log p(reply token | everything before it) under the chat template."""
    import torch

    head = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(prompt + reply, tokenize=False)
    if not whole.startswith(head):
        raise BadInput("the chat template renders the prompt differently with a reply after it; "
                       "the margin needs a template that appends replies")
    prompt_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    reply_ids = tokenizer(whole[len(head):], add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logps = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
    targets = ids[0, 1:]
    picked = logps.gather(-1, targets[:, None])[:, 0]
    return picked[len(prompt_ids) - 1:].sum().item()


def mean_margin(model: Any, tokenizer: Any, pairs: list[dict]) -> float:
    """Mean over pairs of log p(chosen) - log p(rejected), in nats."""
    was_training = model.training
    model.eval()
    try:
        gaps = [reply_logp(model, tokenizer, p["prompt"], p["chosen"])
                - reply_logp(model, tokenizer, p["prompt"], p["rejected"]) for p in pairs]
    finally:
        model.train(was_training)
    return sum(gaps) / len(gaps)
