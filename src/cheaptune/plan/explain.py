"""Stage 5: the recommendation in words, why-not for notable losers, and advice when nothing is feasible."""

from __future__ import annotations

import math

from cheaptune.plan import price_age
from cheaptune.plan.candidates import Exclusion, gib
from cheaptune.plan.doctor import Finding
from cheaptune.plan.pricing import Option
from cheaptune.plan.workload import Constraints, Workload
from cheaptune.runs.meter import usd


def why(best: Option, ranked: list[Option], objective: str) -> str:
    fit = f"peak {gib(best.peak_vram_bytes)} of {gib(best.gpu_memory_bytes)}" + (" per GPU" if best.total_gpus > 1 else "")
    setting = f"micro-batch {best.micro_batch} x {best.grad_accum} accumulation" + (", gradient checkpointing" if best.grad_ckpt else "")
    head = f"{best.label()}: ${best.total:.2f} expected in {best.hours:.1f} h"
    reason = "the cheapest feasible option" if objective == "cost" else "the fastest feasible option"
    runner = ""
    if len(ranked) > 1:
        nxt = ranked[1]
        runner = f"; next best {nxt.label()} at ${nxt.total:.2f}"
    spot = ""
    if best.spot:
        spot = f"; spot with checkpoints every {best.checkpoint_minutes:g} min (Young/Daly), pessimistic ${best.pessimistic_total:.2f}"
    over = price_age.passed_over(best, ranked) if objective == "cost" else ""
    reason += f" ({over})" if over else ""
    return f"{head} - {reason}; {fit}, {setting}{spot}{runner}; {price_age.price_line(best)}."


def _ratio(o: Option, best: Option, objective: str) -> str:
    if objective == "time":
        return f"{o.hours / max(best.hours, 1e-9):.1f}x the winner's time (${o.total:.2f})"
    return f"{o.total / max(best.total, 1e-9):.1f}x the winner's cost (${o.total:.2f}, {o.hours:.1f} h)"


def why_not(ranked: list[Option], excluded: list[Exclusion], objective: str, max_gpus: int = 1,
            limit: int = 6) -> list[str]:
    """The best option of each other method and kind, the fastest, and the memory exclusions that matter
    (with what more GPUs did, or would do, for that method)."""
    if not ranked:
        return []
    best = ranked[0]
    lines: list[str] = []
    seen: set[tuple] = set()

    def add(o: Option) -> None:
        key = (o.method, o.gpu, o.spot)
        if key not in seen:
            seen.add(key)
            mode = "spot" if o.spot else o.kind
            where = o.gpu if o.total_gpus == 1 else o.hardware()
            lines.append(f"{o.method} on {where} {mode}: {_ratio(o, best, objective)}")

    seen.add((best.method, best.gpu, best.spot))
    for method in dict.fromkeys(o.method for o in ranked):  # the best of each other method
        if method != best.method:
            add(next(o for o in ranked if o.method == method))
    for pred in (lambda o: o.spot != best.spot, lambda o: o.gpu != best.gpu):  # other pricing, other GPU
        alt = next((o for o in ranked[1:] if pred(o)), None)
        if alt is not None:
            add(alt)
    fastest = min(ranked, key=lambda o: o.hours)
    if fastest is not best and (fastest.method, fastest.gpu, fastest.spot) not in seen:
        lines.append(f"fastest, {fastest.label()}: {fastest.hours:.1f} h but {_ratio(fastest, best, 'cost')}")
    mem = [e for e in excluded if e.kind == "memory" and e.option.get("gpu_count", 1) == 1]
    for method in dict.fromkeys(e.option["method"] for e in mem):
        biggest = max((e for e in mem if e.option["method"] == method), key=lambda e: e.option["gpu_memory_bytes"])
        lines.append(biggest.reason + _more_gpus(method, ranked, best, objective, max_gpus))
    return lines[:limit]


def _more_gpus(method: str, ranked: list[Option], best: Option, objective: str, max_gpus: int) -> str:
    """Where a method that does not fit this GPU does fit: one larger GPU first (DDP keeps the whole model
    state on each GPU, so several GPUs are not what makes it fit), else the best multi-GPU option."""
    one = next((o for o in ranked if o.method == method and o.total_gpus == 1), None)
    multi = next((o for o in ranked if o.method == method and o.total_gpus > 1), None)
    if one is not None:
        return f"; on one {one.gpu} it fits: {_ratio(one, best, objective)}"
    if multi is not None:
        return f"; on {multi.hardware()} it fits: {_ratio(multi, best, objective)}"
    if max_gpus < 8:
        return "; more GPUs would shard it (--max-gpus 8)"
    return ""


def feasibility_advice(excluded: list[Exclusion], c: Constraints, w: Workload, biggest_gpu: str | None) -> list[str]:
    """What would make an infeasible request feasible, most useful first."""
    plain_budget = bool(budget_only(excluded, c))  # options fit, but cost too much: memory tips would not help
    kinds = {e.kind for e in excluded} - ({"memory"} if plain_budget else set())
    tips: list[str] = []
    if "memory" in kinds:
        if "qlora" not in c.methods:
            tips.append("use QLoRA (--method qlora): 4-bit base weights need about a quarter of the memory")
        if w.seq_len > 512:
            tips.append(f"use shorter sequences (--seq-len {w.seq_len // 2}): activations shrink with them")
        if biggest_gpu:
            tips.append(f"allow a bigger GPU (the largest in the catalog is {biggest_gpu})")
        tips.append(_more_gpus_tip(excluded, c, "shard the model state over them (FSDP/ZeRO-3)"))
    if "budget" in kinds:
        cheapest = min((e.option.get("total", float("inf")) for e in excluded if e.kind == "budget"), default=None)
        if cheapest is not None:
            tips.append(f"raise the budget (--budget {_up(cheapest * 1.1, 2)}): the cheapest option costs {usd(cheapest)}")
    if plain_budget and "qlora" not in c.methods:
        tips.append("or use QLoRA (--method qlora): a 4-bit base fits smaller, cheaper GPUs")
    if "deadline" in kinds:
        fastest = min((e.option.get("hours", float("inf")) for e in excluded if e.kind == "deadline"), default=None)
        if fastest is not None:
            tips.append(f"allow more time (--deadline {_up(fastest * 1.1, 2)}): the fastest option takes {fastest:.2f} h")
        start = min((e.option.get("startup_hours", 0.0) for e in excluded if e.kind == "deadline"), default=0.0)
        if c.deadline_hours is not None and start >= c.deadline_hours:  # more GPUs shorten training, not start-up
            tips.append(f"more GPUs would not help: start-up alone takes {start:.2f} h")
        elif "memory" not in kinds:
            tips.append(_more_gpus_tip(excluded, c, "they finish sooner"))
    if "offers" in kinds or not kinds:
        tips.append("allow more offers: drop --provider/--exclude-providers, use --spot auto and --community")
    return tips


def _up(x: float, places: int) -> str:
    """`x` rounded up at `places` decimals: a limit the advice names must clear the option it quotes
    (rounding 0.117 h x 1.1 to one decimal gave --deadline 0.1, still infeasible)."""
    scale = 10**places
    return f"{math.ceil(x * scale - 1e-9) / scale:.{places}f}"


def _more_gpus_tip(excluded: list[Exclusion], c: Constraints, gain: str) -> str:
    """More GPUs on one node, or several nodes once one node of 8 was tried."""
    tried = max((e.option.get("gpu_count", 1) * e.option.get("num_nodes", 1) for e in excluded), default=1)
    if c.max_gpus < 8:
        return f"use more GPUs (--max-gpus 8): {gain}"
    if tried < 8:
        return f"use more GPUs (allow 8-GPU instances: drop --gpu/--provider filters): {gain}"
    if c.max_gpus < 16:
        return f"use several nodes (--max-gpus 16 or more): {gain}"
    return f"use more nodes (--max-gpus {2 * c.max_gpus}): {gain}"


def high_end(ranked: list[Option], objective: str) -> str:
    """How the recommendation changes when every spot offer is interrupted at the top of its rate's range."""
    if objective != "cost" or not any(o.spot for o in ranked):
        return ""
    best = ranked[0]
    top = min(ranked, key=lambda o: (o.pessimistic_total, o.hours))
    if top is best or top.pessimistic_total >= best.pessimistic_total:
        tail = f" (${best.pessimistic_total:.2f} for the recommendation)" if best.spot else ""
        return f"at the high end of every spot interruption range the recommendation holds{tail}"
    return (f"at the high end of every spot interruption range {best.label()} costs ${best.pessimistic_total:.2f} "
            f"and {top.label()} becomes the cheapest at ${top.pessimistic_total:.2f}")


# Past these a plan is almost surely not what the user meant (a typo in --tokens, the wrong model).
SANE_HOURS = 24 * 30  # a month of wall time
SANE_USD = 50_000.0


def closest(excluded: list[Exclusion], c: Constraints, n: int = 3) -> list[Exclusion]:
    """The n exclusions nearest to feasible: least over the budget or deadline (as a share of it) first;
    without any, the last n (as before)."""
    def over(e: Exclusion) -> float:
        if e.kind == "budget" and c.budget_usd:
            return e.option.get("total", math.inf) / c.budget_usd
        if e.kind == "deadline" and c.deadline_hours:
            return e.option.get("hours", math.inf) / c.deadline_hours
        return math.inf

    near = sorted((e for e in excluded if over(e) < math.inf), key=over)
    return (near + [e for e in excluded[-n:] if e not in near])[:n]


def budget_only(excluded: list[Exclusion], c: Constraints) -> str:
    """When the budget alone rules everything out (options were priced, none fits it), say so plainly."""
    over = [e for e in excluded if e.kind == "budget"]
    if not over or any(e.kind == "deadline" for e in excluded):
        return ""
    cheapest = min(over, key=lambda e: e.option.get("total", float("inf")))
    o = cheapest.option
    where = f"{o['method']} on {o['gpu']} x{o.get('gpu_count', 1)} at {o['provider']}" + (" (spot)" if o.get("spot") else "")
    return (f"the budget alone rules out every option: the cheapest, {where}, costs {usd(o['total'])} "
            f"against --budget {c.budget_usd:g}")


def sanity(best: Option, ranked: list[Option]) -> list[Finding]:
    """A warning when the recommended plan runs for more than a month or costs more than SANE_USD."""
    if best.hours <= SANE_HOURS and best.total <= SANE_USD:
        return []
    fastest = min(ranked, key=lambda o: o.hours)
    faster = "" if fastest is best else f"; the fastest option, {fastest.label()}, takes {fastest.hours / 24:,.1f} days"
    years = f" ({best.hours / 24 / 365:,.1f} years)" if best.hours > 24 * 365 else ""
    return [Finding("implausible-plan", f"the recommendation runs {best.hours / 24:,.1f} days{years} and costs "
                    f"${best.total:,.0f}: check --tokens/--epochs and the model; for a job this size allow more GPUs "
                    f"(--max-gpus) or use --optimize time{faster}")]


def listing(best: Option) -> list[Finding]:
    """A marketplace listing is one machine: name it, what its source says of it, and that it may be gone."""
    facts = getattr(best.offer, "listing", None)
    if not facts:
        return []
    said = [f"reliability {facts['reliability']:.3f}" if facts.get("reliability") is not None else "no reliability score",
            "verified host" if facts.get("verified") else "unverified host"]
    if facts.get("inet_down_mbps"):
        said.append(f"{facts['inet_down_mbps']:.0f} Mbps down")
    if facts.get("disk_gb"):
        said.append(f"{facts['disk_gb']:.0f} GB disk")
    return [Finding("marketplace-listing", f"the recommendation is one machine, {best.provider} listing "
                    f"{best.instance_type} ({', '.join(said)}): someone else may rent it before you launch; run "
                    "`cheaptune prices refresh` and plan again just before launching, or take an alternative")]
