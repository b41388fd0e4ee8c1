"""Token counts for planning: exact with the model's tokenizer, otherwise a labelled estimate."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from cheaptune.data.load import load_dataset_rows
from cheaptune.errors import BadInput

BATCH = 256  # rows per tokenizer call: the fast tokenizer batches in Rust


@dataclass(frozen=True)
class TokenCount:
    tokens: int
    examples: int
    exact: bool
    method: str  # how the number was obtained, for the plan's "why"
    lengths: tuple[int, ...] = field(default=(), repr=False)  # tokens per example counted (the data audit)
    duplicates: int = 0  # rows identical to an earlier row
    skipped: str = ""  # with skip_bad_rows: how many bad rows were left out, and the first


@cache
def _estimate_constants() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((Path(__file__).with_name("token_estimate.yaml")).read_text())


def chars_per_token(family: str | None) -> tuple[float, str]:
    """Characters per token for the estimate, and why: the family's own tokenizer where its compression was
    measured (token_estimate.yaml `tokenizers`; a Llama 2 model cuts English into ~13% more tokens than the
    rule of thumb's tokenizer), else the rule of thumb."""
    c = _estimate_constants()
    base = float(c["chars_per_token"])
    for name, t in c["tokenizers"].items():
        if family and family.lower() in t["families"]:
            why = f"{name} tokenizer: x{float(t['ratio']):.3f} the {base:g} of the rule of thumb from {c['cite']}"
            return base * float(t["ratio"]), why
    return base, f"rule of thumb from {c['cite']}"


def cached_tokenizer(repo_id: str) -> Path | None:
    """The folder holding a hub model's tokenizer in the local Hugging Face cache, if the user has downloaded
    it: counting with it is exact and reads no network. None for anything else (not cached, not a repo id)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(repo_id, "tokenizer_config.json")
        found = [try_to_load_from_cache(repo_id, f) for f in ("tokenizer.json", "tokenizer.model")]
    except ValueError:  # not a valid repo id (a local path, a config file name)
        return None
    here = [Path(f).parent for f in found if isinstance(f, str)]
    return here[0] if isinstance(config, str) and here and Path(config).parent == here[0] else None


def _turns(row: dict[str, Any]) -> list[dict[str, str]] | None:
    """The conversation of a conversational row; None for a plain-text row."""
    if "messages" in row:
        return row["messages"]
    if isinstance(row.get("prompt"), list):
        return row["prompt"] + row["completion"]
    return None


def _plain(row: dict[str, Any]) -> str:
    return row["text"] if "text" in row else row["prompt"] + row["completion"]


def _estimate_row(row: dict[str, Any], chars_per_token: float, per_turn: int) -> float:
    turns = _turns(row)
    if turns is None:
        return len(_plain(row)) / chars_per_token
    return sum(len(t["role"]) + len(t["content"]) for t in turns) / chars_per_token + per_turn * len(turns)


def _load_tokenizer(tokenizer: Any) -> Any:
    if not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(tokenizer))
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise BadInput(f"cannot load a tokenizer from {tokenizer} ({first}); pass a local model folder") from None


def _exact_rows(rows: list[dict[str, Any]], tok: Any) -> list[int]:
    """Tokens per row as training sees them: the chat template for conversations, plain text otherwise."""
    texts, special = [], True
    for row in rows:
        turns = _turns(row)
        if turns is None:
            texts.append(_plain(row))
        else:
            if not getattr(tok, "chat_template", None):
                raise BadInput("the tokenizer has no chat template, so conversational rows cannot be counted "
                               "exactly; use a chat model's tokenizer or count without one")
            texts.append(tok.apply_chat_template(turns, tokenize=False))
            special = False  # the template already wrote the special tokens
    return [len(ids) for ids in tok(texts, add_special_tokens=special)["input_ids"]]


def _sides(pair: dict[str, Any]) -> list[dict[str, Any]]:
    """A preference pair as the two rows trl's concatenated forward runs: prompt + chosen, prompt + rejected."""
    return [{"prompt": pair["prompt"], "completion": pair[side]} for side in ("chosen", "rejected")]


def _per_pair(lengths: list[float]) -> list[float]:
    return [a + b for a, b in zip(lengths[::2], lengths[1::2], strict=True)]


def count_tokens(path: str | os.PathLike, tokenizer: Any = None, fmt: str = "auto", sample: int | None = None,
                 skip_bad_rows: bool = False, objective: str = "sft", family: str | None = None) -> TokenCount:
    """Tokens in one pass over the dataset (one epoch). `tokenizer` is a tokenizer or a local model folder;
    without one, `family` (the catalog's model family) picks the characters per token of the estimate;
    `sample` counts that many rows spread evenly over the file and scales up (then never exact).

    For dpo/orpo a pair counts prompt + chosen + prompt + rejected: the prompt is in both rows of trl's
    concatenated forward, which is also what the trainer's token counter (tokens/s, the probe) counts."""
    from datasets import Dataset

    loaded = load_dataset_rows(path, fmt=fmt, skip_bad_rows=skip_bad_rows, objective=objective)
    ds = loaded.dataset
    n = len(ds)
    if sample is not None and sample < 1:
        raise BadInput(f"sample must be at least 1 row; got {sample}")
    sampled = sample is not None and sample < n
    if sampled:
        step = n / sample
        ds = ds.select(sorted({int(i * step) for i in range(sample)}))
    scale = n / len(ds)
    pairs = objective != "sft"
    rows = Dataset.from_list([side for pair in ds for side in _sides(pair)]) if pairs else ds
    if tokenizer is None:
        per_turn = _estimate_constants()["template_tokens_per_turn"]
        cpt, why = chars_per_token(family)
        lengths = [_estimate_row(r, cpt, per_turn) for r in rows]
        method = f"estimate: characters / {cpt:.2f} per token ({why}) + {per_turn} template tokens per turn"
        exact = False
    else:
        tok = _load_tokenizer(tokenizer)
        lengths = [n for i in range(0, len(rows), BATCH)
                   for n in _exact_rows(list(rows.select(range(i, min(i + BATCH, len(rows))))), tok)]
        method = f"tokenizer {getattr(tok, 'name_or_path', '') or type(tok).__name__}"
        exact = not sampled
    if pairs:
        lengths = _per_pair(lengths)
        method += ", per pair: prompt + chosen + prompt + rejected"
    if sampled:
        method += f", {len(ds)} of {n} rows sampled and scaled"
    seen: set[str] = set()
    duplicates = 0
    for row in ds:
        key = json.dumps(row, sort_keys=True, default=str)
        duplicates += key in seen
        seen.add(key)
    return TokenCount(tokens=round(sum(lengths) * scale), examples=n, exact=exact, method=method,
                      lengths=tuple(round(x) for x in lengths), duplicates=round(duplicates * scale),
                      skipped=_skipped(loaded.n_bad, loaded.bad_examples))


def _skipped(n_bad: int, examples: list[str]) -> str:
    if not n_bad:
        return ""
    return f"{n_bad} bad row{'s' if n_bad > 1 else ''} skipped (--skip-bad-rows); the first: {examples[0]}"
