"""Wiring the planner to the real catalogs, the memory estimator and the token counter.

Kept apart from the planner so the planner stays pure and testable with hand-made inputs. Fit outcomes
are cached on disk (stdlib only), so a warm plan never imports torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import FitFn, FitOutcome, MultiFitFn, planned_micro
from cheaptune.plan.workload import Workload
from cheaptune.util import atomic
from cheaptune.util.paths import cache_dir

FIT_CACHE_SCHEMA = 4  # 2: the peak is at the planned micro-batch; multi-GPU fits; 3: per precision; 4: objective
DEFAULT_EXAMPLE_TOKENS = 512
MAX_MICRO_BATCH = 64


def _fit_key(spec: Any, **parts: Any) -> str:
    from cheaptune.estimate import memory

    blob = json.dumps({"s": FIT_CACHE_SCHEMA, "v": memory.ESTIMATOR_VERSION, "cfg": spec.config, **parts},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _cached(key: str, compute) -> FitOutcome:
    path = cache_dir("plan_fits") / f"{key}.json"
    try:
        return FitOutcome(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    out = compute()
    atomic.write_text(path, json.dumps(out.__dict__))
    return out


def _outcome(req: Any, res: Any, effective_batch: int | None, gpus: int) -> FitOutcome:
    """The fit at the micro-batch the plan will run: the estimate at that micro-batch, not at the largest
    that fits (that can be one more). It is never larger, so the fit's headroom still holds."""
    from cheaptune.estimate.memory import estimate_memory

    if res is None:  # the least it needs: micro-batch 1 with checkpointing
        least = estimate_memory(dataclasses.replace(req, micro_batch=1, grad_ckpt=True))
        return FitOutcome(False, peak_bytes=least.device_total_bytes, trainable_params=least.trainable_params,
                          total_params=least.total_params, basis=least.basis)
    micro, e = res.micro_batch, res.estimate
    if effective_batch is not None:
        micro, _ = planned_micro(res.micro_batch, effective_batch, gpus)
        if micro != res.micro_batch:
            e = estimate_memory(dataclasses.replace(req, micro_batch=micro, grad_ckpt=res.grad_ckpt))
    return FitOutcome(True, micro, res.grad_ckpt, e.device_total_bytes, e.trainable_params, e.total_params, e.basis)


def _request(spec: Any, method: str, seq_len: int, lora_r: int, precision: str, objective: str = "sft",
             precompute_ref: bool = False):
    """The request a fit simulates: exactly what estimate.settings.TrainSettings.request() gives for the
    settings the plan file will store (so the plan's peak can be re-estimated byte for byte)."""
    from cheaptune.estimate.settings import for_gpu

    settings = for_gpu(method, True, precision=precision, lora_r=lora_r, lora_alpha=2 * lora_r, seq_len=seq_len,
                       objective=objective, precompute_ref=precompute_ref)
    return settings.request(spec.id)


def _reference_choice(fit_with, method: str, objective: str, epochs: float) -> FitOutcome:
    """`fit_with(precompute_ref)`; for DPO full fine-tuning both ways, and the one to run, with why.

    The frozen reference copy costs a second set of weights; precomputing costs one no-grad pass over the
    data before training instead of one per epoch (estimate.throughput.reference_passes). Precompute when the
    copy does not fit, or when it is cheaper: more than one epoch, or a larger micro-batch fits without the copy.
    """
    if objective != "dpo" or method != "full":
        return fit_with(False)
    copy, pre = fit_with(False), fit_with(True)
    if not pre.fits:
        return copy
    if not copy.fits:
        why = "the frozen reference copy does not fit, so its log-probs are precomputed before training"
    elif epochs > 1:
        why = f"precomputed reference log-probs score the data once instead of every one of {epochs:g} epochs"
    elif pre.micro_batch > copy.micro_batch:
        why = (f"without the frozen reference copy micro-batch {pre.micro_batch} fits (with it "
               f"{copy.micro_batch}), so its log-probs are precomputed")
    else:
        return dataclasses.replace(copy, note="DPO reference: a frozen copy of the model (it fits, and "
                                               "precomputing would not be faster in one epoch)")
    return dataclasses.replace(pre, note=f"DPO reference: {why}")


def real_fit(spec: Any, seq_len: int, headroom: float, lora_r: int = 16, max_micro_batch: int = 64,
             effective_batch: int | None = None, objective: str = "sft", epochs: float = 1.0) -> FitFn:
    """A FitFn over estimate.memory.fit_micro_batch; when nothing fits, `peak_bytes` is the least it needs.

    Micro-batches beyond the effective batch buy nothing, so `max_micro_batch` caps the search (and its cost).
    With `effective_batch` the outcome is at the micro-batch the plan runs (candidates.planned_micro).
    """
    cap = max(1, min(max_micro_batch, MAX_MICRO_BATCH))

    def fit(method: str, mem: int, precision: str) -> FitOutcome:
        def fit_with(pre: bool) -> FitOutcome:
            key = _fit_key(spec, m=method, mem=mem, seq=seq_len, h=headroom, r=lora_r, cap=cap, eb=effective_batch,
                           p=precision, o=objective, pre=pre)

            def compute() -> FitOutcome:
                from cheaptune.estimate.memory import fit_micro_batch

                req = _request(spec, method, seq_len, lora_r, precision, objective, pre)
                res = fit_micro_batch(req, mem, headroom=headroom, max_micro_batch=cap)
                return dataclasses.replace(_outcome(req, res, effective_batch, 1), precompute_ref=pre)

            return _cached(key, compute)

        return _reference_choice(fit_with, method, objective, epochs)

    return fit


def real_multi_fit(spec: Any, seq_len: int, headroom: float, lora_r: int, effective_batch: int,
                   objective: str = "sft", epochs: float = 1.0) -> MultiFitFn:
    """A MultiFitFn over estimate.sharding.fit_micro_batch_sharded: the per-GPU fit on `gpus` GPUs.

    Each GPU's share of the effective batch caps its micro-batch; the sharded estimate derives from the
    one-GPU estimates (disk-cached), so trying several shardings and GPU counts costs few simulations."""

    def fit(method: str, mem: int, gpus: int, sharding: str, offload: bool, precision: str) -> FitOutcome:
        cap = max(1, min(-(-effective_batch // gpus), MAX_MICRO_BATCH))

        def fit_with(pre: bool) -> FitOutcome:
            key = _fit_key(spec, m=method, mem=mem, seq=seq_len, h=headroom, r=lora_r, eb=effective_batch, n=gpus,
                           sh=sharding, off=offload, p=precision, o=objective, pre=pre)

            def compute() -> FitOutcome:
                from cheaptune.estimate.sharding import fit_micro_batch_sharded

                req = _request(spec, method, seq_len, lora_r, precision, objective, pre)
                res = fit_micro_batch_sharded(req, mem, gpus, sharding, offload, headroom, cap, dict(spec.config))
                sharded = dataclasses.replace(req, gpus=gpus, sharding=sharding, offload=offload)
                return dataclasses.replace(_outcome(sharded, res, effective_batch, gpus), precompute_ref=pre)

            return _cached(key, compute)

        return _reference_choice(fit_with, method, objective, epochs)

    return fit


def load_catalog(prices: str = "cache") -> tuple[list[Any], list[Any]]:
    """GPUs and offers; `prices` is plan --prices: bundled (the snapshot and the user CSV only), cache
    (every source, the newest per provider) or live (refresh the cache through gpuhunt first)."""
    from cheaptune.catalog.gpus import list_gpus
    from cheaptune.catalog.prices import load_offers
    from cheaptune.plan.price_age import CHOICES

    if prices not in CHOICES:
        raise BadInput(f"--prices must be one of {', '.join(CHOICES)}; got {prices!r}")
    if prices == "live":
        from cheaptune.catalog.live import refresh

        refresh()
    return list_gpus(), load_offers(("bundled", "user-csv") if prices == "bundled" else None)


def build_workload(spec: Any, dataset: str | None, tokens: int | None, examples: int | None,
                   avg_tokens: int | None, epochs: float, seq_len: int, effective_batch: int,
                   objective: str = "sft", skip_bad_rows: bool = False) -> Workload:
    """Tokens from a dataset file (exact with a local tokenizer, else a labelled estimate) or from flags."""
    common = {"epochs": epochs, "seq_len": seq_len, "effective_batch": effective_batch, "objective": objective}
    given = sum(x is not None for x in (dataset, tokens, examples))
    if given > 1:
        raise BadInput("give one of: a dataset file, --tokens N, or --examples N --avg-tokens M")
    if dataset is not None:
        from cheaptune.data import count_tokens

        path = Path(dataset)
        if not path.exists():
            raise BadInput(f"dataset {path} not found; pass a JSONL/CSV/Parquet file or use --tokens N")
        local = Path(spec.id) if Path(spec.id).is_dir() else None  # a local model folder has a tokenizer
        tc = count_tokens(path, tokenizer=local, objective=objective, skip_bad_rows=skip_bad_rows)
        basis = f"counted ({tc.method})" if tc.exact else f"estimated ({tc.method})"
        return Workload(tc.tokens, examples=tc.examples, tokens_exact=tc.exact, tokens_basis=basis,
                        dataset_bytes=path.stat().st_size, lengths=tc.lengths, duplicates=tc.duplicates,
                        **common).validate()
    if tokens is not None:
        return Workload(int(tokens), tokens_basis="given (--tokens)", **common).validate()
    if examples is not None:
        avg = avg_tokens or DEFAULT_EXAMPLE_TOKENS
        basis = f"{examples} examples x {avg} tokens" + ("" if avg_tokens else " (assumed average; pass --avg-tokens)")
        return Workload(int(examples) * int(avg), examples=int(examples), tokens_basis=basis, **common).validate()
    raise BadInput("say how much data: a dataset file, --tokens N, or --examples N --avg-tokens M")
