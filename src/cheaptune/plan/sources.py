"""Wiring the planner to the real catalogs, the memory estimator and the token counter.

Kept apart from the planner so the planner stays pure and testable with hand-made inputs. Fit outcomes
are cached on disk (stdlib only), so a warm plan never imports torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import WEIGHTS_FLOOR, FitFn, FitOutcome, MultiFitFn, planned_micro
from cheaptune.plan.microsearch import Points, largest_fit, planned_points, weights_floor
from cheaptune.plan.parallel import ParallelFit
from cheaptune.plan.workload import Workload
from cheaptune.util import jsoncache

FIT_CACHE_SCHEMA = 5  # 2: the peak is at the planned micro-batch; multi-GPU fits; 3: per precision; 4: objective;
# 5: each micro-batch sized at the accumulation the plan runs it with (gradients held across micro-steps)
DEFAULT_EXAMPLE_TOKENS = 512
MAX_MICRO_BATCH = 64
FITS = "plan_fits"  # the cache's folder under $CHEAPTUNE_HOME/cache


def _fit_key(spec: Any, **parts: Any) -> str:
    from cheaptune.estimate.memory import cache, memory

    return jsoncache.digest({"s": FIT_CACHE_SCHEMA, "v": memory.ESTIMATOR_VERSION, "code": cache.code_digest(),
                             "cfg": spec.config, **parts})


def _fit_path(key: str) -> Path:
    return jsoncache.path(FITS, key)


def _cached(key: str, compute) -> FitOutcome:
    # an analytic fallback may come from a transient simulation failure (estimate.memory.cache): not kept
    return jsoncache.cached(FITS, key, compute, decode=lambda d: FitOutcome(**d), encode=lambda o: o.__dict__,
                            keep=lambda o: o.basis != "analytic")


def _outcome(req: Any, found: tuple[int, bool, Any] | None, least: Callable[[], Any]) -> FitOutcome:
    """The fit at the micro-batch the plan will run (microsearch searches only those); when nothing fits,
    the least it needs (micro-batch 1 with checkpointing, `least()`)."""
    if found is None:
        e = least()
        return FitOutcome(False, peak_bytes=e.device_total_bytes, trainable_params=e.trainable_params,
                          total_params=e.total_params, basis=e.basis)
    micro, ckpt, e = found
    return FitOutcome(True, micro, ckpt, e.device_total_bytes, e.trainable_params, e.total_params, e.basis)


def _request(spec: Any, method: str, seq_len: int, lora_r: int, precision: str, objective: str = "sft",
             precompute_ref: bool = False, grad_accum: int = 1, lora_targets: str | None = None):
    """The request a fit simulates: exactly what estimate.settings.TrainSettings.request() gives for the
    settings the plan file will store (so the plan's peak can be re-estimated byte for byte)."""
    from cheaptune.estimate.settings import for_gpu

    settings = for_gpu(method, True, precision=precision, lora_r=lora_r, lora_alpha=2 * lora_r, seq_len=seq_len,
                       objective=objective, precompute_ref=precompute_ref, grad_accum=grad_accum,
                       lora_targets=lora_targets or "all-linear")
    return settings.request(spec.id)


def _reference_ways(method: str, objective: str) -> tuple[bool, ...]:
    """The precompute_ref values a fit tries: both for DPO full fine-tuning (_reference_choice), else no."""
    return (False, True) if objective == "dpo" and method == "full" else (False,)


def _reference_choice(fit_with, method: str, objective: str, epochs: float) -> FitOutcome:
    """`fit_with(precompute_ref)`; for DPO full fine-tuning both ways, and the one to run, with why.

    The frozen reference copy costs a second set of weights; precomputing costs one no-grad pass over the
    data before training instead of one per epoch (estimate.throughput.reference_passes). Precompute when the
    copy does not fit, or when it is cheaper: more than one epoch, or a larger micro-batch fits without the copy.
    """
    if _reference_ways(method, objective) == (False,):
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


def _targets_key(lora_targets: str | None) -> dict[str, str]:
    """The fit-cache key part for --lora-targets: none for the default (all-linear), so those keys stay as they were."""
    return {"t": lora_targets} if lora_targets and lora_targets != "all-linear" else {}


def shared_points(spec: Any, seq_len: int, lora_r: int, objective: str,
                  lora_targets: str | None = None) -> Callable[..., Points]:
    """Points per (method, precision, precompute_ref, accumulation as simulated): the one-GPU estimates every fit
    of the plan shares."""
    memo: dict[tuple, Points] = {}

    def points(method: str, precision: str, pre: bool, accum: int = 1) -> Points:
        req = _request(spec, method, seq_len, lora_r, precision, objective, pre, accum, lora_targets)
        key = (method, precision, pre, req.grad_accum)  # any accumulation >= 2 simulates alike (settings.py)
        if key not in memo:
            from cheaptune.estimate.memory.memory import estimate_memory

            memo[key] = Points(lambda b, gc, r=req: estimate_memory(dataclasses.replace(r, micro_batch=b, grad_ckpt=gc)))
        return memo[key]

    return points


def accumulated(points: Callable[..., Points], method: str, precision: str, pre: bool, effective_batch: int | None,
                gpus: int) -> Points:
    """Points at the accumulation the plan runs each micro-batch with (candidates.planned_micro on `gpus` GPUs):
    with more than one micro-step per optimizer step the gradients are held into the next forward."""
    def at(b: int, gc: bool) -> Any:
        accum = planned_micro(b, effective_batch, gpus)[1] if effective_batch else 1
        return points(method, precision, pre, accum).at(b, gc)

    return Points(at)


def real_fit(spec: Any, seq_len: int, headroom: float, lora_r: int = 16, max_micro_batch: int = 64,
             effective_batch: int | None = None, objective: str = "sft", epochs: float = 1.0,
             shared: Callable[..., Points] | None = None, lora_targets: str | None = None) -> FitFn:
    """A FitFn over the memory estimator; when nothing fits, `peak_bytes` is the least it needs.

    Micro-batches beyond the effective batch buy nothing, so `max_micro_batch` caps the search (and its cost);
    only the micro-batches the plan runs (candidates.planned_micro) are estimated, each once for every memory
    size (`shared`: the same points for real_multi_fit). The fits the planner names ahead run in worker
    processes, each (method, precision) one at a time (plan.parallel).
    """
    cap = max(1, min(max_micro_batch, MAX_MICRO_BATCH))
    points = shared or shared_points(spec, seq_len, lora_r, objective, lora_targets)
    micros = planned_points(effective_batch, 1, cap) if effective_batch else list(range(1, cap + 1))
    params = spec.params

    def fit(method: str, mem: int, precision: str) -> FitOutcome:
        floor = weights_floor(params, method)
        if floor > mem * (1 - headroom):  # no micro-batch can fit: nothing to simulate
            return FitOutcome(False, peak_bytes=floor, total_params=params, basis=WEIGHTS_FLOOR)
        def fit_with(pre: bool) -> FitOutcome:
            key = fit_key(method, mem, precision, pre)

            def compute() -> FitOutcome:
                pts = accumulated(points, method, precision, pre, effective_batch, 1)
                found = largest_fit(pts, micros, mem * (1 - headroom))
                req = _request(spec, method, seq_len, lora_r, precision, objective, pre, lora_targets=lora_targets)
                return dataclasses.replace(_outcome(req, found, lambda: pts.at(1, True)), precompute_ref=pre)

            return _cached(key, compute)

        return _reference_choice(fit_with, method, objective, epochs)

    def fit_key(method: str, mem: int, precision: str, pre: bool) -> str:
        return _fit_key(spec, m=method, mem=mem, seq=seq_len, h=headroom, r=lora_r, cap=cap, eb=effective_batch,
                        p=precision, o=objective, pre=pre, **_targets_key(lora_targets))

    def cold(k: tuple[str, int, str]) -> bool:
        """The fit simulates: above the weights floor and not on disk (so a warm plan forks no worker)."""
        method, mem, precision = k
        return (weights_floor(params, method) <= mem * (1 - headroom)
                and not all(_fit_path(fit_key(method, mem, precision, p)).exists()
                            for p in _reference_ways(method, objective)))

    def warm(k: tuple[str, int, str]) -> object:  # the first point of this fit's search, made before forking
        return accumulated(points, k[0], k[2], False, effective_batch, 1).at(micros[0], False)

    return ParallelFit(fit, cold, warm)


def real_multi_fit(spec: Any, seq_len: int, headroom: float, lora_r: int, effective_batch: int,
                   objective: str = "sft", epochs: float = 1.0, shared: Callable[..., Points] | None = None,
                   lora_targets: str | None = None) -> MultiFitFn:
    """A MultiFitFn: the per-GPU fit on `gpus` GPUs, each GPU's share of the effective batch capping its
    micro-batch. The sharded estimate derives from the one-GPU estimates at the same micro-batch (`shared`
    with real_fit), so trying several shardings and GPU counts costs few simulations."""
    single = shared or shared_points(spec, seq_len, lora_r, objective, lora_targets)

    def fit(method: str, mem: int, gpus: int, sharding: str, offload: bool, precision: str) -> FitOutcome:
        cap = max(1, min(-(-effective_batch // gpus), MAX_MICRO_BATCH))

        def fit_with(pre: bool) -> FitOutcome:
            key = _fit_key(spec, m=method, mem=mem, seq=seq_len, h=headroom, r=lora_r, eb=effective_batch, n=gpus,
                           sh=sharding, off=offload, p=precision, o=objective, pre=pre, **_targets_key(lora_targets))

            def compute() -> FitOutcome:
                from cheaptune.estimate.memory.sharding import FsdpRun, shard_estimate

                req = _request(spec, method, seq_len, lora_r, precision, objective, pre, lora_targets=lora_targets)
                sharded = dataclasses.replace(req, gpus=gpus, sharding=sharding, offload=offload)
                one = accumulated(single, method, precision, pre, effective_batch, gpus)
                pts = Points(lambda b, gc: shard_estimate(one.at(b, gc), gpus, sharding, offload, dict(spec.config),
                                                          FsdpRun.of(sharded)))
                found = largest_fit(pts, planned_points(effective_batch, gpus, cap), mem * (1 - headroom))
                return dataclasses.replace(_outcome(sharded, found, lambda: pts.at(1, True)), precompute_ref=pre)

            return _cached(key, compute)

        return _reference_choice(fit_with, method, objective, epochs)

    return fit


def load_catalog(prices: str = "cache") -> tuple[list[Any], list[Any]]:
    """GPUs and offers; `prices` is plan --prices: bundled (the snapshot and the user CSV only), cache
    (every source, the newest per provider) or live (refresh the cache through gpuhunt first)."""
    from cheaptune.catalog.gpus import list_gpus
    from cheaptune.catalog.sources import load_offers
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
        from cheaptune.data.tokens import cached_tokenizer

        path = Path(dataset)
        if not path.exists():
            raise BadInput(f"dataset {path} not found; pass a JSONL/CSV/Parquet file or use --tokens N")
        # a local model folder has a tokenizer; a hub model may have one in the user's Hugging Face cache
        local = Path(spec.id) if Path(spec.id).is_dir() else cached_tokenizer(spec.id)
        tc = count_tokens(path, tokenizer=local, objective=objective, skip_bad_rows=skip_bad_rows,
                          family=spec.family)
        basis = f"counted ({tc.method})" if tc.exact else f"estimated ({tc.method})"
        return Workload(tc.tokens, examples=tc.examples, tokens_exact=tc.exact, tokens_basis=basis,
                        dataset_bytes=path.stat().st_size, lengths=tc.lengths, duplicates=tc.duplicates,
                        skipped=tc.skipped, **common).validate()
    if tokens is not None:
        return Workload(int(tokens), tokens_basis="given (--tokens)", **common).validate()
    if examples is not None:
        avg = avg_tokens or DEFAULT_EXAMPLE_TOKENS
        basis = f"{examples} examples x {avg} tokens" + ("" if avg_tokens else " (assumed average; pass --avg-tokens)")
        return Workload(int(examples) * int(avg), examples=int(examples), tokens_basis=basis, **common).validate()
    raise BadInput("say how much data: a dataset file, --tokens N, or --examples N --avg-tokens M")
