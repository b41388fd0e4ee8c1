"""`plan --objective grpo`: GPUs, GPU counts and generator placement for a GRPO run, ranked by total cost.

Why its own path: an RL run's cost is set by generation, not by dataset tokens, so the SFT planner's
tokens / throughput does not apply. Each candidate (GPU x count x colocated | server placement, one or half the GPUs serving) is sized by
estimate.grpo_memory (a colocated KV cache that cannot hold one generation call is refused, with why),
timed by estimate.grpo_time with completions at the length the user expects (the cap when not given) and at
the cap (the pessimistic end, which the budget check uses), and priced with the catalog's cheapest on-demand offer and the provider's billing.
Pure functions: the CLI renders the result.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from cheaptune.catalog import DATA_DIR, read_yaml
from cheaptune.errors import BadInput, Infeasible
from cheaptune.estimate.cost import cost
from cheaptune.estimate.grpo_setup import GrpoSetup
from cheaptune.estimate.memory.grpo_memory import estimate_grpo_memory, fit_problem
from cheaptune.estimate.memory.memory import EstimateRequest
from cheaptune.estimate.time.grpo_time import grpo_step_time

SECONDS_PER_HOUR = 3600
GPU_COUNTS = (1, 2, 4, 8)
HOSTED_FILE = DATA_DIR / "hosted.yaml"


@dataclass(frozen=True)
class RlJob:
    """What the user asked for: the model, the RL settings and how much to train."""

    model: Any  # a catalog ModelSpec
    method: str
    prompts: int  # distinct prompts in the data
    steps: int  # optimizer steps
    completions_per_step: int  # trl's global batch, in completions
    num_generations: int = 8
    prompt_len: int = 256
    max_completion_length: int = 256
    beta: float = 0.0
    lora_r: int = 16
    expected_completion_length: int | None = None  # None: every completion at the cap (the pessimistic end)

    @classmethod
    def of(cls, model: Any, method: str, prompts: int, steps: int | None, epochs: float | None,
           completions_per_step: int, **rl: Any) -> RlJob:
        gens = rl.get("num_generations", 8)
        if completions_per_step % gens:
            raise BadInput(f"--effective-batch {completions_per_step} completions per step must be a multiple of "
                           f"--generations {gens}: each prompt's group is scored together")
        if steps is None:
            steps = math.ceil(prompts * (epochs or 1.0) / (completions_per_step // gens))
        return cls(model, method, prompts, steps, completions_per_step, **rl)

    @property
    def prompts_per_step(self) -> int:
        return self.completions_per_step // self.num_generations


@dataclass
class RlOption:
    gpu: str
    gpus: int  # all GPUs rented
    placement: str  # colocate | server
    provider: str
    price_per_hour: float  # all the GPUs
    step_s: float
    step_s_at_cap: float
    generation_share: float
    hours: float
    hours_at_cap: float
    total: float  # USD at the expected completion length (the cap when not given)
    total_at_cap: float  # USD if every completion runs to the cap
    memory_gib: float
    details: dict[str, Any] = field(default_factory=dict)
    server_gpus: int = 0  # GPUs running `trl vllm-serve` (data-parallel replicas); 0 when colocated

    def label(self) -> str:
        k = self.server_gpus
        where = ("vLLM colocated" if self.placement == "colocate"
                 else f"{self.gpus - k} train + {k} vLLM server GPU{'s' if k > 1 else ''}")
        return f"{self.gpus}x {self.gpu} ({where}) at {self.provider}"


def _split(job: RlJob, train_gpus: int) -> tuple[int, int] | None:
    """(micro-batch, accumulation) per training GPU: a prompt's whole group per micro-step where it divides."""
    per_gpu, rem = divmod(job.completions_per_step, train_gpus)
    if rem or per_gpu < 1:
        return None
    micro = math.gcd(per_gpu, job.num_generations)
    return micro, per_gpu // micro


def _setup(job: RlJob, train_gpus: int, placement: str, grad_ckpt: bool, server_gpus: int = 1) -> GrpoSetup | None:
    split = _split(job, train_gpus)
    if split is None:
        return None
    micro, accum = split
    sharding = ("zero3" if job.method == "full" else "ddp") if train_gpus > 1 else None  # full: shard the state
    req = EstimateRequest(model=job.model.id, method=job.method, micro_batch=micro, grad_ckpt=grad_ckpt,
                          gpus=train_gpus, sharding=sharding, lora_r=job.lora_r, allow_long_context=True)
    return GrpoSetup.build(req, prompt_len=job.prompt_len, max_completion_length=job.max_completion_length,
                           num_generations=job.num_generations, grad_accum=accum, beta=job.beta,
                           generation_backend="vllm" if placement == "colocate" else "vllm-server",
                           server_gpus=server_gpus,
                           expected_completion_length=job.expected_completion_length)


def _startup_s(params: int) -> float:
    c = cost.constants()
    weights = params * 2.0
    return c["provision_s"] + c["install_s"] + weights / c["download_bytes_per_s"] + weights / c["disk_read_bytes_per_s"]


def candidate(job: RlJob, gpu: Any, offer: Any, gpus: int, placement: str, headroom: float,
              server_gpus: int = 1) -> RlOption | str:
    """One priced option (`server_gpus` of the `gpus` generating in server placement), or why it does not run."""
    server_gpus = server_gpus if placement == "server" else 0
    train_gpus = gpus - server_gpus
    if train_gpus < 1:
        return "a server placement needs a training GPU beside the server's"
    problem = "the step's completions do not split evenly over the training GPUs"
    for ckpt in (False, True):
        setup = _setup(job, train_gpus, placement, ckpt, max(1, server_gpus))
        if setup is None:
            return problem
        mem = estimate_grpo_memory(setup, gpu.memory_bytes)
        problem = fit_problem(mem, setup, gpu.name, gpu.memory_bytes, headroom)
        if problem is None and setup.server and mem.generator_total_bytes > gpu.memory_bytes * (1 - headroom):
            problem = "the generator's weights and KV cache do not fit one GPU"
        if problem is None:
            break
        if "KV cache" in problem:
            return problem
    if problem is not None:
        return problem
    cfg, params, trainable = job.model.config, mem.train.total_params, mem.train.trainable_params
    t = grpo_step_time(setup, cfg, params, trainable, gpu)
    cap = grpo_step_time(setup, cfg, params, trainable, gpu, at_cap=True)
    price = offer.price_per_gpu_hour * gpus
    run_s, cap_s = job.steps * t.step_seconds + _startup_s(params), job.steps * cap.step_seconds + _startup_s(params)
    bill = [cost.compute_cost(s, price, offer.billing_unit_s, offer.min_billed_s) for s in (run_s, cap_s)]
    return RlOption(gpu.name, gpus, placement, offer.provider, price, t.step_seconds, cap.step_seconds,
                    t.generation_share, run_s / SECONDS_PER_HOUR, cap_s / SECONDS_PER_HOUR, bill[0], bill[1],
                    mem.total_bytes / 2**30,
                    {"micro_batch": setup.request.micro_batch, "grad_accum": setup.grad_accum, "grad_ckpt":
                     setup.request.grad_ckpt, "parts_s": {k: round(v, 3) for k, v in t.parts.items()},
                     "price_source": offer.source, "price_date": offer.date,
                     "vllm_gpu_memory_utilization": setup.memory_utilization}, server_gpus)


def placements(gpus: int) -> list[tuple[str, int]]:
    """(placement, server GPUs) tried on `gpus` GPUs: colocated; one server GPU; from 4 GPUs also half of them
    serving (one server GPU feeding seven trainers is open-r1#161's 78-hour run)."""
    out = [("colocate", 0)] + ([("server", 1)] if gpus > 1 else [])
    return out + ([("server", gpus // 2)] if gpus >= 4 else [])


def plan_grpo(job: RlJob, gpus: list[Any], offers: list[Any], max_gpus: int = 8, headroom: float = 0.10,
              only: tuple[str, ...] = ()) -> tuple[list[RlOption], dict[str, str]]:
    """Options cheapest first, and why each GPU that has none was left out."""
    from cheaptune.catalog.prices import cheapest_per_gpu, filter_offers

    best = {o.gpu: o for o in cheapest_per_gpu(filter_offers(offers, spot=False))}
    options, why = [], {}
    for gpu in gpus:
        if gpu.name not in best or (only and gpu.name not in only) or not gpu.cuda:
            continue
        found = []
        for n in (c for c in GPU_COUNTS if c <= max_gpus):
            for placement, k in placements(n):
                o = candidate(job, gpu, best[gpu.name], n, placement, headroom, k)
                if isinstance(o, RlOption):
                    found.append(o)
                elif n == 1 and placement == "colocate":
                    why[gpu.name] = o
        options += found
        if found:
            why.pop(gpu.name, None)
    if not options:
        reasons = "; ".join(f"{g}: {w}" for g, w in list(why.items())[:3])
        raise Infeasible(f"no GPU runs this GRPO step ({reasons}); lower --generations or --completion-len, use "
                         "--method lora or qlora, or raise --max-gpus")
    return sorted(options, key=lambda o: (o.total, o.hours)), why


def warnings(job: RlJob, options: list[RlOption], budget: float | None) -> list[str]:
    """The classic RL money mistakes, where this plan risks them."""
    out = []
    if budget is None:
        out.append("no budget: an RL run's length depends on how long its completions get; set --budget, and "
                   "`train` stops at it")
    elif options and options[0].total_at_cap > budget:
        out.append(f"the cheapest option costs ${options[0].total_at_cap:,.2f} if every completion runs to "
                   f"{job.max_completion_length} tokens, over the ${budget:,.2f} budget: lower --completion-len "
                   "or --steps")
    for o in [o for o in options if o.placement == "server" and o.gpus > 2 and o.server_gpus == 1][:1]:
        if o.generation_share > 0.5:
            out.append(f"{o.label()}: one GPU generates while {o.gpus - 1} wait {o.generation_share:.0%} of each "
                       "step (open-r1#161's 78 h on 8x A100); colocated vLLM or more server GPUs keeps them busy")
    if options and options[0].generation_share > 0.5:
        out.append(f"generation is {options[0].generation_share:.0%} of a step on the cheapest option: "
                   f"--generations {job.num_generations} x --completion-len {job.max_completion_length} sets the "
                   "bill more than the GPU does")
    return out


def hosted_rl(params: float, job: RlJob, path=HOSTED_FILE) -> list[str]:
    """Hosted RL services for a model this size, with their dated prices (hosted.yaml rl_offers)."""
    doc = read_yaml(path)
    sources = doc.get("sources") or {}
    size_b = params / 1e9
    sampled = job.steps * job.completions_per_step * job.max_completion_length
    trained = job.steps * job.completions_per_step * (job.prompt_len + job.max_completion_length)
    out = []
    for row in doc.get("rl_offers") or []:
        if not row["min_params_b"] < size_b <= row["max_params_b"]:
            continue
        src = sources.get(row["provider"], {})
        usd = (trained * row["usd_per_million_trained"] + sampled * row["usd_per_million_sampled"]) / 1e6
        only = f", only {row['models']}" if row.get("models") else ""
        out.append(f"{row['provider']}: ${usd:,.2f} for this run, every completion at the cap ({row['note']}{only}; price as of "
                   f"{src.get('source_date', 'undated')}: {src.get('source', 'no source on file')})")
    return out


def cheapest_by_placement(options: list[RlOption]) -> dict[str, RlOption]:
    """The cheapest option of each placement."""
    best: dict[str, RlOption] = {}
    for o in options:
        best.setdefault(o.placement, o)
    return best


def to_dict(job: RlJob, options: list[RlOption], why: dict[str, str], warn: list[str],
            hosted: list[str]) -> dict[str, Any]:
    return {"objective": "grpo", "model": job.model.id,
            "job": {k: v for k, v in dataclasses.asdict(job).items() if k != "model"},
            "options": [dataclasses.asdict(o) for o in options], "left_out": why, "warnings": warn,
            "hosted": hosted, "basis": "step time with completions at expected_completion_length (max_completion_length when not "
            "given: the pessimistic end); total_at_cap if every completion runs to max_completion_length; constants "
            "estimate/data/grpo.yaml, accuracy bench/grpo_accuracy.py"}
