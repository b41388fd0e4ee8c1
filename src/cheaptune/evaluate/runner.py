"""Score a tuned model against its base on held-out rows: loss/perplexity on the reference answers, and
greedy answers scored by `scoring` (batched; a progress bar on stderr).

The base is the same loaded model with the adapter switched off (peft's `disable_adapter`), so one copy
of the weights serves both. Prompts are rendered as trl renders them in training: conversational rows
through the chat template, plain-text prompts as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cheaptune.evaluate.scoring import score_answers


@dataclass
class Example:
    prompt: str  # rendered text, ready to tokenize
    reference: str  # the answer to score ("" for text rows: loss only)


def examples(dataset: Any, tokenizer: Any, limit: int | None = None) -> list[Example]:
    """Rows of a loaded dataset (messages | prompt+completion | text) as rendered prompt + reference."""
    rows = list(dataset)[:limit] if limit else list(dataset)
    out = []
    for row in rows:
        if "messages" in row:
            turns = row["messages"]
            last = max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=None)
            if last is None:
                continue
            prompt, ref = turns[:last], turns[last]["content"]
        elif "prompt" in row:
            prompt, ref = row["prompt"], row["completion"]
            ref = ref[-1]["content"] if isinstance(ref, list) else ref
        else:
            out.append(Example(row["text"], ""))
            continue
        if isinstance(prompt, list):
            prompt = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        out.append(Example(prompt, ref))
    return out


def answer_loss(model: Any, tokenizer: Any, exs: list[Example], batch_size: int, bar: Any = None) -> float:
    """Mean loss per reference token (every token for text rows)."""
    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(exs), batch_size):
        batch = exs[i:i + batch_size]
        ids, labels = [], []
        for ex in batch:
            p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"] if ex.reference else []
            full = tokenizer(ex.prompt + ex.reference + (tokenizer.eos_token or "") if ex.reference else ex.prompt,
                             add_special_tokens=False)["input_ids"]
            ids.append(full)
            labels.append([-100] * len(p) + full[len(p):])
        width = max(len(x) for x in ids)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        x = torch.tensor([s + [pad] * (width - len(s)) for s in ids], device=device)
        y = torch.tensor([s + [-100] * (width - len(s)) for s in labels], device=device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in ids], device=device)
        with torch.no_grad():
            logits = model(input_ids=x, attention_mask=mask).logits[:, :-1].float()
        target = y[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                 ignore_index=-100, reduction="sum")
        total += float(loss)
        count += int((target != -100).sum())
        if bar is not None:
            bar(len(batch))
    return total / max(count, 1)


def generate(model: Any, tokenizer: Any, exs: list[Example], batch_size: int, max_new_tokens: int,
             bar: Any = None) -> list[str]:
    """Greedy answers, left-padded batches."""
    import torch

    device = next(model.parameters()).device
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[str] = []
    try:
        for i in range(0, len(exs), batch_size):
            batch = exs[i:i + batch_size]
            enc = tokenizer([e.prompt for e in batch], return_tensors="pt", padding=True,
                            add_special_tokens=False).to(device)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
            out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            if bar is not None:
                bar(len(batch))
    finally:
        tokenizer.padding_side = side
    return out


def score(model: Any, tokenizer: Any, exs: list[Example], batch_size: int, max_new_tokens: int,
          phase: Callable[[str, int], Callable[[int], None]] | None = None, side: str = "") -> dict[str, Any]:
    """loss, perplexity and (when rows have answers) the answers and their scores, for one model. `phase(name,
    rows)` starts a pass and returns what counts its rows (a progress bar)."""
    loss = answer_loss(model, tokenizer, exs, batch_size, phase(f"{side} loss", len(exs)) if phase else None)
    out: dict[str, Any] = {"loss": loss, "perplexity": math.exp(min(loss, 700))}
    answered = [e for e in exs if e.reference]
    if answered:
        bar = phase(f"{side} answers", len(answered)) if phase else None
        preds = generate(model, tokenizer, answered, batch_size, max_new_tokens, bar)
        out.update(score_answers(preds, [e.reference for e in answered]))
        out["answers"] = preds
    return out


def compare(model: Any, tokenizer: Any, exs: list[Example], batch_size: int = 8, max_new_tokens: int | None = None,
            progress: bool = True) -> dict[str, Any]:
    """Base (adapter off) and tuned scores on the same examples; `model` is a PeftModel."""
    from tqdm import tqdm

    refs = [e.reference for e in exs if e.reference]
    if max_new_tokens is None:
        longest = max((len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in refs), default=0)
        max_new_tokens = min(longest + 8, 512)
    model.eval()
    with tqdm(total=len(exs), desc="eval", disable=not progress, unit="row") as bar:
        def phase(name: str, rows: int) -> Callable[[int], None]:
            """One bar per pass over the rows (loss, then answers; base, then tuned): it counts rows, not passes."""
            bar.reset(total=rows)
            bar.set_description(f"eval {name}")
            return bar.update

        with model.disable_adapter():
            base = score(model, tokenizer, exs, batch_size, max_new_tokens, phase, "base")
        tuned = score(model, tokenizer, exs, batch_size, max_new_tokens, phase, "tuned")
    return {"rows": len(exs), "base": base, "tuned": tuned,
            "examples": [{"prompt": e.prompt, "reference": e.reference, "base": b, "tuned": t}
                         for e, b, t in zip([e for e in exs if e.reference][:3], base.get("answers", []),
                                            tuned.get("answers", []), strict=False)]}
