"""`estimate --objective grpo` and `plan --objective grpo`: validate, build, run and render the GRPO estimates.

The computing lives in estimate.grpo_* and plan.grpo; this module turns flags into their inputs and their
results into tables and lines (or one JSON object).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class RlFlags:
    """The GRPO flags `estimate` and `plan` share (trl's GRPOConfig names)."""

    generations: int = 8
    completion_len: int = 256
    prompt_len: int = 256
    beta: float = 0.0
    backend: str = "vllm"
    vllm_memory: float | None = None
    server_gpus: int = 1
    expected_len: int | None = None  # the longest completion a call typically reaches; None: the cap


def setup_from(req: Any, flags: RlFlags, grad_accum: int):
    """The GrpoSetup of `estimate`'s request: its micro-batch counts completions (default: one prompt's group)."""
    from cheaptune.estimate.grpo_setup import GrpoSetup

    if flags.backend == "auto":
        flags = dataclasses.replace(flags, backend="vllm")
    if (req.micro_batch * grad_accum * req.gpus) % flags.generations:
        raise BadInput(f"--micro-batch x --grad-accum x GPUs ({req.micro_batch * grad_accum * req.gpus}) completions "
                       f"per step must be a multiple of --generations {flags.generations}")
    return GrpoSetup.build(req, prompt_len=flags.prompt_len, max_completion_length=flags.completion_len,
                           num_generations=flags.generations, grad_accum=grad_accum, beta=flags.beta,
                           generation_backend=flags.backend, server_gpus=flags.server_gpus,
                           expected_completion_length=flags.expected_len,
                           **{"server_memory_utilization" if flags.backend == "vllm-server"
                              else "vllm_gpu_memory_utilization": flags.vllm_memory})


def estimate_grpo(req: Any, board: Any, flags: RlFlags, grad_accum: int, headroom: float, as_json: bool) -> None:
    """Memory parts per training GPU (and per generator GPU), the verdict, and the step time with its parts."""
    from cheaptune.estimate.memory.grpo_memory import estimate_grpo_memory, fit_problem
    from cheaptune.estimate.memory.memory import model_config
    from cheaptune.estimate.memory.profiles import get_profile
    from cheaptune.estimate.time.grpo_time import grpo_step_time
    from cheaptune.estimate.time.throughput import stack_for

    if board is None:
        raise BadInput("--objective grpo needs --gpu (vLLM's share and the step time depend on the board)")
    setup = setup_from(req, flags, grad_accum)
    stack = stack_for(get_profile(req.trainer).name)
    mem = estimate_grpo_memory(setup, board.memory_bytes, stack=stack)
    problem = fit_problem(mem, setup, board.name, board.memory_bytes, headroom)
    cfg, _ = model_config(req.model)
    t = grpo_step_time(setup, cfg, mem.train.total_params, mem.train.trainable_params, board, stack)
    cap = grpo_step_time(setup, cfg, mem.train.total_params, mem.train.trainable_params, board, stack, at_cap=True)
    if as_json:
        from cheaptune.cli.output import emit_json

        emit_json({"objective": "grpo", "gpu": board.name, "memory": mem.to_dict(), "fits": problem is None,
                   "problem": problem, "time": t.to_dict(), "time_at_cap": cap.to_dict(),
                   "setup": {k: v for k, v in dataclasses.asdict(setup).items() if k != "request"}})
        return
    _render(mem, setup, board, t, cap, problem)


def _render(mem: Any, setup: Any, board: Any, t: Any, cap: Any, problem: str | None) -> None:
    from rich.table import Table

    from cheaptune.cli.output import console

    out = console()
    title = (f"GRPO step on {setup.request.gpus}x {board.name}: {setup.num_generations} generations x "
             f"({setup.prompt_len} + {setup.max_completion_length}) tokens, {setup.generation_backend}")
    table = Table(title=f"{title}: memory per training GPU")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    for name, n in mem.parts.items():
        table.add_row(name, f"{n / GIB:.2f}")
    table.add_row("total", f"{mem.total_bytes / GIB:.2f}", style="bold")
    out.print(table)
    if mem.generator_parts:
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in mem.generator_parts.items())
        out.print(f"vLLM server, per generator GPU (GiB): {parts}; total {mem.generator_total_bytes / GIB:.2f}")
    out.print(f"KV cache: {mem.kv_bytes_per_token:,} bytes per token, {mem.engine_batch} sequences per generation "
              f"call need {mem.kv_needed_bytes / GIB:.2f} GiB")
    for note in mem.notes:
        out.print(note)
    out.print(f"fits one {board.name}: yes" if problem is None else f"does not fit: {problem}")
    parts = ", ".join(f"{k} {v:.2f}" for k, v in t.parts.items() if v)
    out.print(f"step time: {t.step_seconds:.1f} s per optimizer step ({t.completions_per_step} completions), "
              f"generation {t.generation_share:.0%} of it (parts, s: {parts})")
    if setup.expected_completion_length:
        out.print(f"at {setup.expected_completion_length} tokens per completion (--expected-completion-len); if every "
                  f"completion runs to {setup.max_completion_length}: {cap.step_seconds:.1f} s, generation "
                  f"{cap.generation_share:.0%}")
    else:
        out.print(f"with every completion at {setup.max_completion_length} tokens, the pessimistic end: on public "
                  "GRPO runs this read x2.6 slow typically, never fast; with their logged completion length x1.27 "
                  "(bench/grpo_accuracy.py). Pass --expected-completion-len N if you know how long yours get")


def count_prompts(path: Path) -> int:
    """Prompt rows in a JSONL or CSV file (one per non-empty line; CSV without its header)."""
    try:
        lines = [x for x in path.read_text().splitlines() if x.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise BadInput(f"{path}: cannot read the prompt file ({err}); pass a JSONL or CSV file of prompts") from None
    if path.suffix.lower() not in (".jsonl", ".csv"):
        raise BadInput(f"{path}: plan --objective grpo counts prompts in .jsonl or .csv files; pass one, or --prompts N")
    n = len(lines) - (1 if path.suffix.lower() == ".csv" else 0)
    if n < 1:
        raise BadInput(f"{path}: no prompt rows; add rows or pass --prompts N")
    return n


def plan_grpo_command(model: str, data: Path | None, prompts: int | None, steps: int | None, epochs: float | None,
                      effective_batch: int | None, method: str | None, lora_r: int | None, flags: RlFlags,
                      budget: float | None, gpu: list[str] | None, max_gpus: int, headroom: float, top: int,
                      prices: str, as_json: bool) -> None:
    """Rank GPU x count x placement for a GRPO run by total cost, with the hosted RL services and the warnings."""
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.catalog.models import resolve_model
    from cheaptune.plan import grpo, sources

    if data is not None and prompts is not None:
        raise BadInput("give the prompts once: a prompt file (--data) or --prompts N, not both")
    if data is None and prompts is None and steps is None:
        raise BadInput("plan --objective grpo needs the prompts: --data prompts.jsonl, --prompts N, or --steps N")
    method = method or "lora"
    if method not in ("full", "lora", "qlora"):
        raise BadInput(f"--method {method!r}: plan --objective grpo plans full, lora or qlora (one at a time)")
    n = count_prompts(data) if data is not None else (prompts or 0)
    spec = resolve_model(model)
    job = grpo.RlJob.of(spec, method, n, steps, epochs, effective_batch or 8 * flags.generations,
                        num_generations=flags.generations, prompt_len=flags.prompt_len,
                        max_completion_length=flags.completion_len, beta=flags.beta, lora_r=lora_r or 16,
                        expected_completion_length=flags.expected_len)
    gpus, offers = sources.load_catalog(prices.lower())
    from cheaptune.cli.vocab import names_given

    only = tuple(resolve_gpu(g).name for g in names_given("--gpu", gpu))
    options, why = grpo.plan_grpo(job, gpus, offers, max_gpus, headroom, only)
    warn = grpo.warnings(job, options, budget)
    hosted = grpo.hosted_rl(spec.params, job)
    if as_json:
        from cheaptune.cli.output import emit_json

        emit_json(grpo.to_dict(job, options, why, warn, hosted))
        return
    _render_plan(job, options[:top], grpo.cheapest_by_placement(options), why, warn, hosted)


def _render_plan(job: Any, options: list, best: dict, why: dict, warn: list[str], hosted: list[str]) -> None:
    from rich.table import Table

    from cheaptune.cli.output import console

    out = console()
    out.print(f"GRPO {job.model.id} {job.method}: {job.steps:,} steps x {job.prompts_per_step} prompts x "
              f"{job.num_generations} generations, completions up to {job.max_completion_length} tokens")
    expected = job.expected_completion_length
    length = expected or job.max_completion_length
    cap = f"; at the {job.max_completion_length}-token cap beside it" if expected else ", the pessimistic end"
    table = Table(title=f"options, cheapest first (cost at {length}-token completions{cap})")
    for col in ("GPUs", "placement", "provider", "$/h", "s/step", "gen %", "hours", "total $") + (
            ("at cap $",) if expected else ()):
        table.add_column(col)
    for o in options:
        table.add_row(f"{o.gpus}x {o.gpu}", o.placement, o.provider, f"{o.price_per_hour:.2f}", f"{o.step_s:.1f}",
                      f"{o.generation_share:.0%}", f"{o.hours:.1f}", f"{o.total:,.2f}",
                      *((f"{o.total_at_cap:,.2f}",) if expected else ()))
    out.print(table)
    for placement, o in best.items():
        at_cap = f" (${o.total_at_cap:,.2f} at the cap)" if expected else ""
        out.print(f"cheapest {placement}: {o.label()}, ${o.total:,.2f}{at_cap}")
    for gpu, reason in list(why.items())[:5]:
        out.print(f"not {gpu}: {reason}")
    for line in hosted:
        out.print(f"hosted RL: {line}")
    for line in warn:
        out.print(f"warning: {line}")
