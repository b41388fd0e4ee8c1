"""The planner pipeline: candidates -> estimates -> cost -> choose -> explain. Pure over its arguments.

Inputs are passed in (model shape, GPU list, offers, `fit` and `multi_fit` callables), so tests can plan
over small hand-made catalogs; `plan.sources` wires in the real catalogs and the memory estimator.
One GPU first; several GPUs (plan/scaleout.py) only for the methods one GPU cannot serve.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cheaptune.errors import BadInput, Infeasible
from cheaptune.estimate.cost.cost import SECONDS_PER_HOUR, compute_cost
from cheaptune.estimate.cost.cost import constants as default_constants
from cheaptune.estimate.policy import compute_dtype
from cheaptune.estimate.time.speedups import for_gpu
from cheaptune.estimate.time.throughput import Job, ModelShape, adapted_per_layer, step_time
from cheaptune.plan import choose, data_audit, explain, hosted, scaleout
from cheaptune.plan.candidates import (
    Exclusion,
    FitFn,
    GpuFit,
    MultiFitFn,
    fit_key,
    fit_pair,
    planned_micro,
    run_precision,
)
from cheaptune.plan.doctor import Facts, Finding, run_checks
from cheaptune.plan.pricing import (
    Option,
    describe_terms,
    other_stack_line,
    price_option,
    startup_seconds,
)
from cheaptune.plan.scaleout import Candidate
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
    high_end: str = ""  # the recommendation at the top of the spot interruption ranges
    hosted: str = ""  # the same job on a hosted fine-tuning API
    audit: list[str] = field(default_factory=list)  # what the data costs (a plan from a dataset file)

    @property
    def recommended(self) -> Option | None:
        return self.options[0] if self.options else None

    def alternatives(self) -> list[Option]:
        """Near-best offers that run the same settings (method, GPU, count, nodes, sharding) for failover."""
        best = self.recommended
        if best is None:
            return []
        same = (best.method, best.gpu, best.gpu_count, best.num_nodes, best.sharding)
        return [o for o in self.options[1:] if (o.method, o.gpu, o.gpu_count, o.num_nodes, o.sharding) == same
                and o.total <= best.total * ALTERNATIVE_SLACK][:5]


# what an exclusion says of the candidate, not of the model: a board without 4-bit kernels, an offer filtered out
NOT_FIT_KINDS = frozenset({"hardware", "offers"})


def _refuse_the_model(excluded: list[Exclusion]) -> None:
    """Bad input (exit 2), not Infeasible (exit 3), when every candidate sized was refused by the model itself (its
    config.json transformers will not build, a method it cannot train): no GPU, budget or deadline changes that."""
    refused = list(dict.fromkeys(e.reason for e in excluded if e.kind == "model"))  # one line per reason, in order
    if refused and all(e.kind == "model" or e.kind in NOT_FIT_KINDS for e in excluded):
        raise BadInput("; ".join(refused))


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
    multi_fit: MultiFitFn | None = None,
    ahead: Callable[[list[tuple[str, int, str]]], None] | None = None,
) -> PlanResult:
    """Rank every feasible (method, GPUs, offer); raise Infeasible (with advice on `.result`) when none is.

    Without `multi_fit` every option uses one GPU. `ahead` (plan.parallel.ParallelFit.ahead) is told the
    one-GPU fits `fit` will be asked for next, in order."""
    c, w = constraints.validate(), workload.validate()
    consts = consts or default_constants()
    gpus = [g for g in gpus if not c.gpus or g.name in c.gpus]
    offers = list(offers)
    names = {g.name for g in gpus}
    allowed, excluded = choose.allowed_offers(offers, names, c)
    by_gpu: dict[str, list[Any]] = {}
    for o in allowed:
        if o.gpu_count == 1:
            by_gpu.setdefault(o.gpu, []).append(o)
    in_play = sorted((g for g in gpus if g.name in by_gpu), key=lambda g: g.memory_bytes)
    single = [Candidate(m, g, 1, 1, tuple(by_gpu[g.name])) for m in c.methods for g in in_play]
    cache: dict = {}
    keys = (lambda ks: ahead([key for k in ks if (key := fit_key(k.method, k.gpu))])) if ahead else None
    feasible, more, skipped = _explore(single, [], c, w, shape, consts,
                                       lambda k: fit_pair(k.method, k.gpu, fit, c.headroom, cache), keys)
    excluded += more
    notes = _notes(c, gpus, by_gpu, allowed)
    if multi_fit is not None:
        notes += _scale_out(c, w, gpus, allowed, shape, consts, multi_fit, feasible, excluded, skipped)
    ranked = choose.rank(feasible, c.optimize)
    if skipped:
        notes.append(f"{sum(skipped.values())} candidates not estimated: even at their best case they rank below the "
                     f"top {c.top}" + (" or miss the budget/deadline by more than an option priced" if
                                       c.budget_usd is not None or c.deadline_hours is not None else ""))
    result = PlanResult(model_id, w, c, ranked, excluded, [], notes=notes)
    if not ranked:
        _refuse_the_model(excluded)
        biggest = max(gpus, key=lambda g: g.memory_bytes).name if gpus else None
        result.advice = explain.feasibility_advice(excluded, c, w, biggest)
        reasons = explain.budget_only(excluded, c) or "; ".join(e.reason for e in explain.closest(excluded, c)) or "no offers match the filters"
        fix = f". To make it feasible: {'; '.join(result.advice)}" if result.advice else ""  # none: the reason says it
        err = Infeasible(f"no feasible option ({reasons}){fix}")
        err.result = result  # the CLI prints exclusions and advice from it
        raise err
    best = ranked[0]
    if best.details.get("reference"):  # dpo full: which reference the recommended option runs, and why
        notes.append(best.details["reference"])
    if best.details["speedups"]["line"]:
        notes.append(best.details["speedups"]["line"])
    if best.details["speedups"].get("unmeasured_line"):
        notes.append(best.details["speedups"]["unmeasured_line"])
    if best.details.get("mfu_ceiling"):
        notes.append(best.details["mfu_ceiling"])
    notes.append(describe_terms(best))
    if best.method in ("lora", "qlora") and (alt := other_stack_line(best, w, shape, consts)):
        notes.append(alt)
    result.why = explain.why(best, ranked, c.optimize)
    result.why_not = explain.why_not(ranked, excluded, c.optimize, c.max_gpus)
    result.high_end = explain.high_end(ranked, c.optimize)
    result.hosted = hosted.compare(shape.params, w.train_tokens, best, objective=w.objective)
    result.audit = data_audit.audit(w, best, shape, consts, context_length)
    facts = _facts(best, ranked, w, c, context_length, offers, shape, consts, fit)
    result.warnings = run_checks(facts) + explain.sanity(best, ranked) + explain.listing(best)
    return result


def network_line(w: Workload) -> str:
    """What the multi-node options were timed over: the network --network states, or the assumed one and why."""
    if w.network is not None:
        return f"between nodes: {w.network}, as --network states"
    return (f"between nodes we assume {w.inter_node_network} (the price files do not say which instances have "
            "InfiniBand; --network infiniband, a rate like 100gbit or an instance type states it)")


def _scale_out(c: Constraints, w: Workload, gpus: list[Any], allowed: list[Any], shape: ModelShape, consts: dict,
               multi_fit: MultiFitFn, feasible: list[Option], excluded: list[Exclusion], skipped: Counter) -> list[str]:
    """Add multi-GPU options (one node, then several, then with CPU offload) for the methods one GPU
    cannot serve, each stage only for methods the earlier ones did not serve; return notes."""
    need = scaleout.methods_needing(c, feasible, excluded, skipped)
    notes = [f"{m} tried on several GPUs: {why}" for m, why in need.items()]
    cache: dict = {}
    todo = list(need)
    crossed = False  # were options on several nodes priced (over w.network)?
    for multi_node, shardings in scaleout.STAGES:
        if shardings == scaleout.OFFLOAD:
            todo = [m for m in todo if m not in scaleout.fitted(excluded)]
        if not todo or (multi_node and c.max_gpus < 2 * scaleout.NODE_SIZE):
            continue
        cands = scaleout.candidates(todo, gpus, allowed, c, w.effective_batch, multi_node)
        ok, more, skip = _explore(cands, feasible, c, w, shape, consts,
                                  lambda k, sh=shardings: scaleout.fit_candidate(k, multi_fit, cache, sh))
        feasible += ok
        excluded += more
        skipped.update(skip)
        if cands and multi_node:
            crossed = True
            notes.append(f"several nodes tried for {', '.join(todo)}; {network_line(w)}")
        if cands and shardings == scaleout.OFFLOAD:
            notes.append(f"CPU offload tried for {', '.join(todo)}: check the instance has host RAM for the model state")
        notes = list(dict.fromkeys(notes))
        served = {o.method for o in feasible}
        todo = [m for m in todo if m not in served and not skip[m]]  # pruned methods are not unserved
    if w.network is not None and not crossed:
        notes.append(f"--network {w.network} not used: no option here needed several nodes")
    return notes


def _best_case(k: Candidate, c: Constraints, w: Workload, shape: ModelShape, consts: dict) -> tuple[float, float]:
    """Lower bounds on the candidate's (cost, hours): the step-time model at its best for the candidate
    (the largest micro-batch per GPU in one accumulation step, no checkpointing, no trainable adapter
    weights, no communication, the optimizer step shared by every GPU as ZeRO-3/FSDP share it), the speed
    options' factor as pricing applies it, no spot loss, the cheapest offer. Every part left out is >= 0
    and every part kept is at its least, so no option costs less."""
    micro, _ = planned_micro(w.effective_batch, w.effective_batch, k.gpus)
    precision = compute_dtype(run_precision(k.method, k.gpu), getattr(k.gpu, "bf16", False))
    job = Job(shape, k.method, w.seq_len, micro, precision=precision, adapted_modules=adapted_per_layer(w.lora_targets))
    parts = step_time(job, k.gpu).parts
    least_s = parts["compute"] + parts["dequant"] + parts["fixed"] + parts["optimizer"] / k.gpus
    one = micro * w.seq_len / least_s * for_gpu(k.gpu, k.method, c.speedups).factor
    run_s = sum(startup_seconds(shape, w, consts).values()) + w.train_tokens / (one * k.gpus)
    cost = k.nodes * min(compute_cost(run_s, o.price_per_hour, o.billing_unit_s, o.min_billed_s) for o in k.offers)
    return cost, run_s / SECONDS_PER_HOUR


def _beyond_limits(cost: float, hours: float, c: Constraints, excluded: list[Exclusion], w: Workload,
                   shape: ModelShape, consts: dict) -> Callable[[Candidate], Exclusion] | None:
    """Even at its best case the candidate is over --budget (or past --deadline) and no nearer to it than an
    option already priced over it: it can be neither feasible nor the closest miss the advice quotes. Then
    the exclusion to record (its bound as its total or hours, which the advice never quotes: a priced miss is
    nearer); else None."""
    from cheaptune.runs.meter import usd

    def nearest(kind: str, key: str) -> float | None:
        return min((e.option[key] for e in excluded if e.kind == kind and key in e.option), default=None)

    def exclusion(kind: str, why: str) -> Callable[[Candidate], Exclusion]:
        return lambda k: Exclusion({"method": k.method, "gpu": k.gpu.name, "gpu_count": k.gpus_per_node,
                                    "num_nodes": k.nodes, "total": cost, "hours": hours, "startup_hours": start_h},
                                   f"{k.method} on {k.gpu.name} x{k.gpus}: {why}", kind)

    over, late = nearest("budget", "total"), nearest("deadline", "hours")
    start_h = round(sum(startup_seconds(shape, w, consts).values()) / SECONDS_PER_HOUR, 4)
    if c.budget_usd is not None and cost > c.budget_usd and over is not None and cost > over:
        return exclusion("budget", f"at least {usd(cost)} even at its best case, over the {usd(c.budget_usd)} budget")
    if c.deadline_hours is not None and hours > c.deadline_hours and late is not None and hours > late:
        return exclusion("deadline", f"at least {hours:.2f} h even at its best case, past the "
                                     f"{c.deadline_hours:g} h deadline")
    return None


def _explore(cands: list[Candidate], known: list[Option], c: Constraints, w: Workload, shape: ModelShape,
             consts: dict, fitter: Callable[[Candidate], GpuFit | Exclusion],
             ahead: Callable[[list[Candidate]], None] | None = None) -> tuple[list[Option], list[Exclusion], Counter]:
    """Fit and price candidates from the best best-case up; skip fitting a candidate whose best case cannot
    reach the top N (of `known` and what this call found), or cannot meet --budget/--deadline nor come closer
    to them than a priced miss. This skips most memory simulations, an infeasible plan's too. `ahead` is told,
    before each fit, the candidates that may be fitted next (bounds ascend and the cut-off only falls, so none
    past it is), so their fits can start in parallel (plan.parallel); then an empty list."""
    by = 1 if c.optimize == "time" else 0
    bounds = [(_best_case(k, c, w, shape, consts), i, k) for i, k in enumerate(cands)]
    ordered = sorted(bounds, key=lambda t: (t[0][by], t[1]))
    metric = choose.rank_key(c.optimize)
    feasible: list[Option] = []
    excluded: list[Exclusion] = []
    skipped: Counter = Counter()
    try:
        for i, ((cost, hours), _, k) in enumerate(ordered):
            pool = known + feasible
            cut = metric(choose.rank(pool, c.optimize)[c.top - 1])[0] if len(pool) >= c.top else math.inf
            if (hours if by else cost) > cut:
                skipped[k.method] += 1  # ranked out: the method is served by what ranks above
                continue
            beyond = _beyond_limits(cost, hours, c, excluded, w, shape, consts)
            if beyond is not None:
                skipped[("limits", k.method)] += 1  # counted, but the method is not served: more GPUs may still be
                excluded.append(beyond(k))
                continue
            if ahead is not None:
                ahead([j for b, _, j in itertools.takewhile(lambda t, cut=cut: t[0][by] <= cut, ordered[i:])])
            got = fitter(k)
            if isinstance(got, Exclusion):
                excluded.append(got)
                continue
            ok, over = choose.apply_limits([price_option(got, o, w, shape, consts, c.speedups) for o in k.offers], c)
            feasible += ok
            excluded += over
    finally:
        if ahead is not None:
            ahead([])
    return feasible, excluded, skipped


def _notes(c: Constraints, gpus: list[Any], by_gpu: dict[str, list[Any]], allowed: list[Any]) -> list[str]:
    notes = []
    if "dora" not in c.methods and c.methods == ("full", "lora", "qlora"):
        notes.append("DoRA not compared: it needs LoRA's memory plus a weight-norm pass per step, so it never costs less; ask with --method dora")
    multi_only = sorted({o.gpu for o in allowed if o.gpu_count > 1} - set(by_gpu))
    if multi_only:
        notes.append(f"{', '.join(multi_only)}: only multi-GPU instances, used when one GPU cannot serve a method")
    missing = [g.name for g in gpus if g.name not in by_gpu and g.name not in multi_only]
    if missing:
        notes.append(f"{len(missing)} catalog GPUs have no allowed offer: {', '.join(missing[:8])}{'...' if len(missing) > 8 else ''}")
    return notes


def _shadow(method: str, best: Option, w: Workload, shape: ModelShape, consts: dict, fit: FitFn, gpu: Any,
            speedups: bool | tuple[str, ...] = True) -> Option | None:
    """Price another method on the winner's GPU and offer (one GPU only), for the doctor's comparisons."""
    if best.total_gpus > 1 or best.offer is None:
        return None
    out = fit(method, best.gpu_memory_bytes, run_precision(method, gpu))
    if not out.fits:
        return None
    return price_option(GpuFit(method, gpu, out), best.offer, w, shape, consts, speedups)


def _facts(best: Option, ranked: list[Option], w: Workload, c: Constraints, context: int | None,
           offers: list[Any], shape: ModelShape, consts: dict, fit: FitFn) -> Facts:
    gpu = _gpu_of(best)
    peft = None
    if best.method == "full":
        alt = next((o for o in ranked if o.method in ("lora", "qlora") and o.total < best.total), None)
        if alt is None and gpu is not None:
            alt = _shadow("lora", best, w, shape, consts, fit, gpu, c.speedups)
            alt = alt if alt and alt.total < best.total else None
        peft = f"{alt.method} on {alt.gpu} (${alt.total:.2f})" if alt else None
    lora_same = None
    if best.method == "qlora" and gpu is not None:
        alt = next((o for o in ranked if o.method == "lora" and o.gpu == best.gpu and o.offer is best.offer), None)
        alt = alt or _shadow("lora", best, w, shape, consts, fit, gpu, c.speedups)
        lora_same = f"${alt.total:.2f} vs ${best.total:.2f}" if alt and alt.total < best.total else None
    spot_alt = None
    if not best.spot and c.spot == "never" and gpu is not None:
        spot_offers = [o for o in offers if o.gpu == best.gpu and o.spot and o.gpu_count == best.gpu_count]
        gf = best.fit or GpuFit(best.method, gpu, fit(best.method, best.gpu_memory_bytes,
                                                             run_precision(best.method, gpu)))
        cheaper = [p for p in (price_option(gf, o, w, shape, consts, c.speedups) for o in spot_offers)
                   if p.total < best.total]
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
