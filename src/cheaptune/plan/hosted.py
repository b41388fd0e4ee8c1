"""The alternative a user would pick instead: the same job trained by a hosted fine-tuning API.

Hosted APIs bill training per token (dataset tokens x epochs) by model-size bracket, method and objective
(catalog/data/hosted.yaml: each provider with its URL, the date its source gives and the day it was read).
The plan names the cheapest one that serves this model's size and method, the others that do, and the
job size above which renting GPUs costs less; APIs that tune only their own models, or are closing, are
named apart. The model itself (or an equivalent) must be on the provider's list.
"""

from __future__ import annotations

import functools
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from cheaptune.catalog import DATA_DIR, ReadDate, SourceDate, SourceRef, file_version, load_rows, read_yaml
from cheaptune.errors import BadInput
from cheaptune.plan.price_age import age_days

HOSTED_FILE = DATA_DIR / "hosted.yaml"
TOKENS_PER_MILLION = 1_000_000
SECONDS_PER_HOUR = 3600
SETUP_RISK = ("renting carries the setup risk hosted APIs take on for you (the environment, an out-of-memory "
              "error or a preemption cost time and money), and a hosted API serves the tuned model on its servers")


class HostedOffer(BaseModel):
    provider: str
    min_params_b: float = Field(ge=0)
    max_params_b: float = Field(gt=0)
    method: Literal["lora", "full"]
    objective: Literal["sft", "dpo"] = "sft"
    usd_per_million_tokens: float = Field(gt=0)
    basis: Literal["quoted", "range-low", "range-high"] = "quoted"
    models: str = ""  # the models a bracket is limited to, when the provider lists only some
    own_models_only: bool = False  # tunes only its own closed models: never this model's alternative
    closes: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}$")


class HostedSource(BaseModel):
    source: SourceRef
    source_date: SourceDate
    read: ReadDate
    serving: str


@functools.lru_cache(maxsize=4)
def _table(path: Path, version: tuple[int, int]) -> tuple[tuple[HostedOffer, ...], dict[str, HostedSource]]:
    offers = tuple(load_rows(path, "offers", HostedOffer, "provider"))
    raw = read_yaml(path).get("sources")
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: expected a top-level 'sources:' mapping of provider -> source, source_date, read")
    sources = {}
    for name, row in raw.items():
        try:
            sources[name] = HostedSource.model_validate(row)
        except Exception as err:  # noqa: BLE001 - pydantic's message, as one line
            raise BadInput(f"{path}: sources.{name}: {str(err).splitlines()[-2].strip()}") from None
    missing = sorted({o.provider for o in offers} - set(sources))
    if missing:
        raise BadInput(f"{path}: no source for {', '.join(missing)}; add it under 'sources:'")
    return offers, sources


def table(path: Path = HOSTED_FILE) -> tuple[tuple[HostedOffer, ...], dict[str, HostedSource]]:
    return _table(Path(path), file_version(path))


def serving(size_b: float, method: str, objective: str, path: Path = HOSTED_FILE) -> list[HostedOffer]:
    """Offers for a model of this size that train it with this method class and objective, cheapest first."""
    want = "full" if method == "full" else "lora"
    return sorted((o for o in table(path)[0]
                   if o.min_params_b < size_b <= o.max_params_b and o.method == want and o.objective == objective
                   and not o.own_models_only and o.closes is None),
                  key=lambda o: o.usd_per_million_tokens)


def break_even_tokens(best: Any, usd_per_million: float) -> float | None:
    """Training tokens above which renting costs less than the hosted rate; None when it never does.

    Renting costs a fixed part (start-up, storage, egress, billing minimums) plus a rate per token at the
    option's speed; hosted is a rate per token only."""
    per_token_self = best.price_per_hour * best.num_nodes / (best.tokens_per_s * SECONDS_PER_HOUR)
    per_token_hosted = usd_per_million / TOKENS_PER_MILLION
    train_tokens = best.tokens_per_s * best.details.get("train_hours", 0.0) * SECONDS_PER_HOUR
    fixed = max(0.0, best.total - per_token_self * train_tokens)
    if per_token_hosted <= per_token_self:
        return None
    return fixed / (per_token_hosted - per_token_self)


def _dated(src: HostedSource, today: date) -> str:
    age = age_days(src.source_date, today)
    return f"price as of {src.source_date}" + ("" if age is None else f", {age} d old")


def compare(params: float, train_tokens: float, best: Any, path: Path = HOSTED_FILE, objective: str = "sft",
            today: date | None = None) -> str:
    """The cheapest hosted API for this job, the others that serve it, the break-even and who is closing."""
    today = today or date.today()
    size_b = params / 1e9
    offers, sources = table(path)
    fits = serving(size_b, best.method, objective, path)
    apart = sorted({o.provider for o in offers if o.own_models_only or o.closes})
    closing = "; ".join(f"{o.provider} tunes only its own models and takes no new jobs after {o.closes}"
                        for o in offers if o.closes)
    others = [p for p in apart if not any(o.provider == p and o.closes for o in offers)]
    tail = "; ".join(x for x in (f"not for this model: {', '.join(others)} (own models only)" if others else "",
                                 closing) if x)
    if not fits:
        return (f"no hosted fine-tuning price on file for a {size_b:.1f}B {best.method} {objective} job "
                f"({Path(path).name})" + (f"; {tail}" if tail else ""))
    o = fits[0]
    src = sources[o.provider]
    cost = train_tokens / TOKENS_PER_MILLION * o.usd_per_million_tokens
    as_method = "" if best.method in ("lora", "qlora", "full") else f" (as lora, not {best.method})"
    limited = f", only {o.models}" if o.models else ""
    basis = "" if o.basis == "quoted" else f", {o.basis} of the provider's range"
    line = (f"cheapest hosted API for this job: ${cost:.2f} at {o.provider} ({o.min_params_b:g}-{o.max_params_b:g}B, "
            f"{o.method} {objective}{as_method}{limited}, ${o.usd_per_million_tokens:.2f}/M training tokens{basis}, "
            f"{_dated(src, today)}: {src.source}) if it offers this model or an equivalent; {src.serving}")
    rest = [f"{h.provider} ${train_tokens / TOKENS_PER_MILLION * h.usd_per_million_tokens:.2f}"
            for h in fits[1:] if h.provider != o.provider]
    if rest:
        line += f". Also: {', '.join(dict.fromkeys(rest))}"
    even = break_even_tokens(best, o.usd_per_million_tokens)
    if even is None:
        line += f". Renting ({best.label()}) never costs less per token than {o.provider} here"
    else:
        side = "renting is cheaper" if train_tokens > even else "hosted is cheaper"
        line += (f". Break-even: above {even / TOKENS_PER_MILLION:,.1f}M training tokens renting GPUs costs less "
                 f"(this job: {train_tokens / TOKENS_PER_MILLION:,.1f}M, so {side}: ${best.total:.2f} rented vs "
                 f"${cost:.2f} hosted)")
    return f"{line}; {SETUP_RISK}" + (f"; {tail}" if tail else "")
