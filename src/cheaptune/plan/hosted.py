"""The alternative a user would pick instead: the same job trained by a hosted fine-tuning API.

Hosted APIs bill training per token (dataset tokens x epochs) by model-size bracket (catalog/data/
hosted.yaml, each row sourced). The line names the provider, bracket and method; the model itself (or an
equivalent) must be on the provider's list, and the tuned model then runs on their servers.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from cheaptune.catalog import DATA_DIR, file_version, load_rows

HOSTED_FILE = DATA_DIR / "hosted.yaml"
TOKENS_PER_MILLION = 1_000_000


class HostedOffer(BaseModel):
    provider: str
    min_params_b: float = Field(ge=0)
    max_params_b: float = Field(gt=0)
    method: str
    usd_per_million_tokens: float = Field(gt=0)
    billed: str
    serving: str
    source: str
    retrieved: str


@functools.lru_cache(maxsize=4)
def _offers(path: Path, version: tuple[int, int]) -> tuple[HostedOffer, ...]:
    return tuple(load_rows(path, "offers", HostedOffer, "provider", inherit=("retrieved",)))


def compare(params: float, train_tokens: float, best: Any, path: Path = HOSTED_FILE) -> str:
    """'the same job as a hosted API: $X (...)', and plainly when running it yourself costs more."""
    size_b = params / 1e9
    fits = [o for o in _offers(Path(path), file_version(path)) if o.min_params_b < size_b <= o.max_params_b]
    if not fits:
        return f"no hosted fine-tuning price on file for a {size_b:.1f}B model ({Path(path).name})"
    o = min(fits, key=lambda h: h.usd_per_million_tokens)
    cost = train_tokens / TOKENS_PER_MILLION * o.usd_per_million_tokens
    as_method = "" if best.method in ("lora", "qlora") else f" (as {o.method}, not {best.method})"
    line = (f"the same job as a hosted API: ${cost:.2f} ({o.provider}, {o.min_params_b:g}-{o.max_params_b:g}B models, "
            f"{o.method}{as_method}, ${o.usd_per_million_tokens:.2f}/M training tokens, retrieved {o.retrieved}), "
            f"if it offers this model or an equivalent; the tuned model is then served there ({o.serving})")
    if best.total > cost:
        line += f". Running it yourself costs more: ${best.total:.2f}, {best.total / max(cost, 1e-9):.1f}x the hosted price"
    return line
