"""Wiring the planner to the real catalogs, the memory estimator and the token counter.

Kept apart from the planner so the planner stays pure and testable with hand-made inputs. Fit outcomes
are cached on disk (stdlib only), so a warm plan never imports torch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import FitFn, FitOutcome
from cheaptune.plan.workload import Workload
from cheaptune.util import atomic
from cheaptune.util.paths import cache_dir

FIT_CACHE_SCHEMA = 1
DEFAULT_EXAMPLE_TOKENS = 512
MAX_MICRO_BATCH = 64


def _fit_key(spec: Any, method: str, mem: int, seq_len: int, headroom: float, lora_r: int, cap: int) -> str:
    from cheaptune.estimate import memory

    blob = json.dumps({"s": FIT_CACHE_SCHEMA, "v": memory.ESTIMATOR_VERSION, "cfg": spec.config, "m": method,
                       "mem": mem, "seq": seq_len, "h": headroom, "r": lora_r, "cap": cap}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def real_fit(spec: Any, seq_len: int, headroom: float, lora_r: int = 16, max_micro_batch: int = 64) -> FitFn:
    """A FitFn over estimate.memory.fit_micro_batch; when nothing fits, `peak_bytes` is the least it needs.

    Micro-batches beyond the effective batch buy nothing, so `max_micro_batch` caps the search (and its cost).
    """
    cap = max(1, min(max_micro_batch, MAX_MICRO_BATCH))

    def fit(method: str, mem: int) -> FitOutcome:
        path = cache_dir("plan_fits") / f"{_fit_key(spec, method, mem, seq_len, headroom, lora_r, cap)}.json"
        try:
            return FitOutcome(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass
        from cheaptune.estimate.memory import EstimateRequest, estimate_memory, fit_micro_batch

        req = EstimateRequest(model=spec.id, method=method, seq_len=seq_len, lora_r=lora_r)
        res = fit_micro_batch(req, mem, headroom=headroom, max_micro_batch=cap)
        if res is None:
            least = estimate_memory(EstimateRequest(model=spec.id, method=method, seq_len=seq_len, lora_r=lora_r,
                                                    micro_batch=1, grad_ckpt=True))
            out = FitOutcome(False, peak_bytes=least.device_total_bytes, trainable_params=least.trainable_params,
                             total_params=least.total_params, basis=least.basis)
        else:
            e = res.estimate
            out = FitOutcome(True, res.micro_batch, res.grad_ckpt, e.device_total_bytes, e.trainable_params,
                             e.total_params, e.basis)
        atomic.write_text(path, json.dumps(out.__dict__))
        return out

    return fit


def load_catalog() -> tuple[list[Any], list[Any]]:
    from cheaptune.catalog.gpus import list_gpus
    from cheaptune.catalog.prices import load_offers

    return list_gpus(), load_offers()


def build_workload(spec: Any, dataset: str | None, tokens: int | None, examples: int | None,
                   avg_tokens: int | None, epochs: float, seq_len: int, effective_batch: int) -> Workload:
    """Tokens from a dataset file (exact with a local tokenizer, else a labelled estimate) or from flags."""
    common = {"epochs": epochs, "seq_len": seq_len, "effective_batch": effective_batch}
    given = sum(x is not None for x in (dataset, tokens, examples))
    if given > 1:
        raise BadInput("give one of: a dataset file, --tokens N, or --examples N --avg-tokens M")
    if dataset is not None:
        from cheaptune.data import count_tokens

        path = Path(dataset)
        if not path.exists():
            raise BadInput(f"dataset {path} not found; pass a JSONL/CSV/Parquet file or use --tokens N")
        local = Path(spec.id) if Path(spec.id).is_dir() else None  # a local model folder has a tokenizer
        tc = count_tokens(path, tokenizer=local)
        basis = f"counted ({tc.method})" if tc.exact else f"estimated ({tc.method})"
        return Workload(tc.tokens, examples=tc.examples, tokens_exact=tc.exact, tokens_basis=basis,
                        dataset_bytes=path.stat().st_size, **common).validate()
    if tokens is not None:
        return Workload(int(tokens), tokens_basis="given (--tokens)", **common).validate()
    if examples is not None:
        avg = avg_tokens or DEFAULT_EXAMPLE_TOKENS
        basis = f"{examples} examples x {avg} tokens" + ("" if avg_tokens else " (assumed average; pass --avg-tokens)")
        return Workload(int(examples) * int(avg), examples=int(examples), tokens_basis=basis, **common).validate()
    raise BadInput("say how much data: a dataset file, --tokens N, or --examples N --avg-tokens M")
