"""The planner pipeline: candidates -> estimates -> cost -> choose -> explain. Pure over its arguments.

Inputs are passed in (model shape, GPU list, offers, a `fit` callable), so tests can plan over small
hand-made catalogs; `plan.sources` wires in the real catalogs and the memory estimator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cheaptune.errors import Infeasible
from cheaptune.estimate.cost import SECONDS_PER_HOUR, compute_cost
from cheaptune.estimate.cost import constants as default_constants
from cheaptune.estimate.throughput import ModelShape, estimate_throughput
from cheaptune.plan import choose, explain
from cheaptune.plan.candidates import Exclusion, FitFn, GpuFit, fit_pair
from cheaptune.plan.doctor import Facts, Finding, run_checks
from cheaptune.plan.pricing import Option, precision_for, price_option, startup_seconds
from cheaptune.plan.workload import Constraints, Workload

ALTERNATIVE_SLACK = 1.25  # failover offers within 25% of the winner's total


@dataclass
class PlanResult:
    model_id: str
    workload: Workload
    constraints: Constraints
    options: list[Option]
    excluded: list[Exclusion]
    warnings: list[Finding]
    why: str = ""
    why_not: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @property
    def recommended(self) -> Option | None:
        return self.options[0] if self.options else None

    def alternatives(self) -> list[Option]:
        """Near-best offers that run the same settings (same method and GPU) for failover."""
        best = self.recommended
        if best is None:
            return []
        return [o for o in self.options[1:] if o.method == best.method and o.gpu == best.gpu
                and o.total <= best.total * ALTERNATIVE_SLACK][:5]


def make_plan(
    model_id: str,
    shape: ModelShape,
    context_length: int | None,
    workload: Workload,
    constraints: Constraints,
    gpus: Iterable[Any],
    offers: Iterable[Any],
    fit: FitFn,
    consts: dict[str, float] | None = None,
) -> PlanResult:
    """Rank every feasible (method, GPU, offer); raise Infeasible (with advice on `.result`) when none is."""
    c, w = constraints.validate(), workload.validate()
    consts = consts or default_constants()
    gpus = [g for g in gpus if not c.gpus or g.name in c.gpus]
    offers = list(offers)
    names = {g.name for g in gpus}
    allowed, excluded = choose.allowed_offers(offers, names, c)
    by_gpu: dict[str, list[Any]] = {}
    for o in allowed:
        by_gpu.setdefault(o.gpu, []).append(o)
    in_play = sorted((g for g in gpus if g.name in by_gpu), key=lambda g: g.memory_bytes)
    feasible, more_excluded, skipped = _explore(c, w, in_play, by_gpu, shape, consts, fit)
    excluded += more_excluded
    ranked = choose.rank(feasible, c.objective)
    notes = _notes(c, gpus, by_gpu)
    if skipped:
        notes.append(f"{skipped} (method, GPU) pairs not estimated: even at their best case they rank below the top {c.top}")
    result = PlanResult(model_id, w, c, ranked, excluded, [], notes=notes)
    if not ranked:
        biggest = max(gpus, key=lambda g: g.memory_bytes).name if gpus else None
        result.advice = explain.feasibility_advice(excluded, c, w, biggest)
        reasons = "; ".join(e.reason for e in excluded[-3:]) or "no offers match the filters"
        err = Infeasible(f"no feasible option ({reasons}). To make it feasible: " + "; ".join(result.advice))
        err.result = result  # the CLI prints exclusions and advice from it
        raise err
    best = ranked[0]
    result.why = explain.why(best, ranked, c.objective)
    result.why_not = explain.why_not(ranked, excluded, c.objective)
    facts = _facts(best, ranked, w, c, context_length, offers, shape, consts, fit)
    result.warnings = run_checks(facts)
    return result


def _best_case(method: str, gpu: Any, offers: list[Any], c: Constraints, w: Workload, shape: ModelShape,
               consts: dict) -> float:
    """A lower bound on the pair's cost (or hours): no checkpointing, the largest micro-batch, no spot loss."""
    tput = estimate_throughput(shape, gpu, method, w.seq_len, w.effective_batch, False, 0, precision_for(gpu))
    run_s = sum(startup_seconds(shape, w, consts).values()) + w.train_tokens / tput.tokens_per_s
    if c.objective == "time":
        return run_s / SECONDS_PER_HOUR
    return min(compute_cost(run_s, o.price_per_hour, o.billing_unit_s, o.min_billed_s) for o in offers)


def _explore(c: Constraints, w: Workload, gpus: list[Any], by_gpu: dict[str, list[Any]], shape: ModelShape,
             consts: dict, fit: FitFn) -> tuple[list[Option], list[Exclusion], int]:
    """Fit and price (method, GPU) pairs from the best best-case up; stop fitting once a pair's best case
    cannot reach the top N. This skips most memory simulations for expensive GPUs on a cold cache."""
    pairs = sorted(((_best_case(m, g, by_gpu[g.name], c, w, shape, consts), m, g) for m in c.methods for g in gpus),
                   key=lambda t: t[0])
    metric = choose.rank_key(c.objective)
    feasible: list[Option] = []
    excluded: list[Exclusion] = []
    cache: dict = {}
    skipped = 0
    for bound, method, gpu in pairs:
        if len(feasible) >= c.top and bound > metric(choose.rank(feasible, c.objective)[c.top - 1])[0]:
            skipped += 1
            continue
        got = fit_pair(method, gpu, fit, c.headroom, cache)
        if isinstance(got, Exclusion):
            excluded.append(got)
            continue
        ok, over = choose.apply_limits([price_option(got, o, w, shape, consts) for o in by_gpu[gpu.name]], c)
        feasible += ok
        excluded += over
    return feasible, excluded, skipped


def _notes(c: Constraints, gpus: list[Any], by_gpu: dict[str, list[Any]]) -> list[str]:
    notes = []
    if c.max_gpus > 1:
        notes.append(f"--max-gpus {c.max_gpus} accepted; multi-GPU options come with the scale-out issue, so every option uses 1 GPU")
    if "dora" not in c.methods and c.methods == ("full", "lora", "qlora"):
        notes.append("DoRA not compared: it needs LoRA's memory plus a weight-norm pass per step, so it never costs less; ask with --method dora")
    missing = [g.name for g in gpus if g.name not in by_gpu]
    if missing:
        notes.append(f"{len(missing)} catalog GPUs have no allowed single-GPU offer: {', '.join(missing[:8])}{'...' if len(missing) > 8 else ''}")
    return notes


def _shadow(method: str, best: Option, w: Workload, shape: ModelShape, consts: dict, fit: FitFn, gpu: Any) -> Option | None:
    """Price another method on the winner's GPU and offer, for the doctor's comparisons."""
    out = fit(method, best.gpu_memory_bytes)
    if not out.fits or best.offer is None:
        return None
    return price_option(GpuFit(method, gpu, out), best.offer, w, shape, consts)


def _facts(best: Option, ranked: list[Option], w: Workload, c: Constraints, context: int | None,
           offers: list[Any], shape: ModelShape, consts: dict, fit: FitFn) -> Facts:
    gpu = _gpu_of(best)
    peft = None
    if best.method == "full":
        alt = next((o for o in ranked if o.method in ("lora", "qlora") and o.total < best.total), None)
        if alt is None and gpu is not None:
            alt = _shadow("lora", best, w, shape, consts, fit, gpu)
            alt = alt if alt and alt.total < best.total else None
        peft = f"{alt.method} on {alt.gpu} (${alt.total:.2f})" if alt else None
    lora_same = None
    if best.method == "qlora" and gpu is not None:
        alt = next((o for o in ranked if o.method == "lora" and o.gpu == best.gpu and o.offer is best.offer), None)
        alt = alt or _shadow("lora", best, w, shape, consts, fit, gpu)
        lora_same = f"${alt.total:.2f} vs ${best.total:.2f}" if alt and alt.total < best.total else None
    spot_alt = None
    if not best.spot and c.spot == "never" and gpu is not None:
        spot_offers = [o for o in offers if o.gpu == best.gpu and o.spot and o.gpu_count == 1]
        gf = GpuFit(best.method, gpu, fit(best.method, best.gpu_memory_bytes))
        cheaper = [p for p in (price_option(gf, o, w, shape, consts) for o in spot_offers) if p.total < best.total]
        if cheaper:
            top = min(cheaper, key=lambda p: p.total)
            spot_alt = f"spot at {top.provider} would cost ${top.total:.2f} expected vs ${best.total:.2f}"
    compute = best.cost["compute"]
    return Facts(
        method=best.method, gpu_name=best.gpu, gpu_bf16=getattr(gpu, "bf16", None), precision=best.precision,
        peak_bytes=best.peak_vram_bytes, gpu_memory_bytes=best.gpu_memory_bytes, spot=best.spot,
        checkpoint_minutes=best.checkpoint_minutes, budget_usd=c.budget_usd, seq_len=w.seq_len,
        context_length=context, tokens_per_s=best.tokens_per_s, packing=True, dataloader_workers=0,
        overhead_share=best.details["billed_overhead_usd"] / compute if compute > 0 else None,
        per_second_billing=best.billing_unit_s <= 1,
        egress_merged_usd=best.details["egress_merged_usd"], egress_adapter_usd=best.details["egress_adapter_usd"],
        total_usd=best.total, peft_alternative=peft, lora_same_gpu=lora_same, spot_alternative=spot_alt,
    )


def _gpu_of(option: Option) -> Any:
    return option.spec
