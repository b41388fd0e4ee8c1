"""`cheaptune plan`: the cheapest way to run a fine-tune, with its time, its cost and the reasons."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import bounded, path, refuse_alone, typed
from cheaptune.cli.vocab import Spot, budget_option, json_option, names_given, network_option, spot_option

DEFAULT_SEQ_LEN = 2048  # tokens per packed sequence when --seq-len is not given (capped at the model's context)
GRPO_ONLY = ("prompts", "steps", "generations", "completion_len", "prompt_len", "beta", "expected_len")
NOT_GRPO = ("tokens", "examples", "avg_tokens", "seq_len", "config", "trainer", "versions", "deadline", "providers",
            "exclude_providers", "spot", "community", "speedups", "optimize", "skip_bad_rows", "markdown", "wide",
            "progress", "save", "maximize", "no_calibration")  # flags cli/grpo.py's plan does not read


def plan_command(
    ctx: typer.Context,
    model_arg: str | None = typer.Argument(None, metavar="MODEL",
                                           help="Model: catalog name, hub id, config.json or local model folder."),
    dataset: Path | None = typer.Argument(None, metavar="DATA", parser=path, help="Same as --data (kept as an alias)."),
    model_opt: str | None = typer.Option(None, "--model", help="The model, instead of the positional MODEL."),
    data: Path | None = typer.Option(None, "--data", parser=path, help="Dataset file (JSONL/CSV/Parquet); or use --tokens / --examples."),
    tokens: float | None = typer.Option(None, "--tokens", callback=bounded(1, 1e15), help="Training tokens per epoch, e.g. 2e7 (instead of a dataset)."),
    examples: float | None = typer.Option(None, "--examples", callback=bounded(1, 1e12), help="Number of examples (with --avg-tokens)."),
    avg_tokens: int | None = typer.Option(None, "--avg-tokens", callback=bounded(1, 10**7), help="Average tokens per example (default 512)."),
    epochs: float | None = typer.Option(None, "--epochs", callback=bounded(0, 1000, above=True), help="Passes over the data (default 1)."),
    seq_len: int | None = typer.Option(None, "--seq-len", callback=bounded(8, 10**7), help="Sequence length (tokens per packed sequence; default 2048, or the model's context if shorter)."),
    effective_batch: int | None = typer.Option(None, "--effective-batch", callback=bounded(1, 2**20), help="Sequences per optimiser step (default 16)."),
    method: str | None = typer.Option(None, "--method", help="auto (full, lora, qlora; the default) or a comma list: full,lora,qlora,dora."),
    lora_r: int | None = typer.Option(None, "--lora-r", callback=bounded(1, 2**16), help="LoRA rank for adapter methods (default 16)."),
    lora_targets: str | None = typer.Option(None, "--lora-targets", help="Modules the adapter wraps, a comma list of "
                                            "presets (qv, attention, mlp, all-linear: the default; lm_head adds the "
                                            "output head) or module names; sized, timed and saved as given (wins over "
                                            "a config's key)."),
    config: Path | None = typer.Option(None, "--config", parser=path, help="Plan the run a cheaptune, Axolotl, LLaMA-Factory or "
                                       "litgpt YAML config describes (flags given win over its keys); with --save, "
                                       "sized as `cheaptune train` runs it."),
    trainer: str | None = typer.Option(None, "--trainer", help="With --config: whose training step to size (default: "
                                       "the config's trainer: key, else its trainer; cheaptune for what `cheaptune "
                                       "train` runs); NAME==VERSION for a release."),
    versions: str | None = typer.Option(None, "--versions", help="With --config: library versions of the run, e.g. "
                                        "bitsandbytes==0.42.0 (each wins over the config's versions: key)."),
    budget: float | None = budget_option("Most you will spend, USD."),
    deadline: float | None = typer.Option(None, "--deadline", callback=bounded(0, 1e6, above=True), help="Latest finish, hours from launch."),
    providers: str | None = typer.Option(None, "--provider", help="Only these providers (comma list)."),
    exclude_providers: str | None = typer.Option(None, "--exclude-providers", help="Never these providers."),
    gpu: list[str] | None = typer.Option(None, "--gpu", help="Only these GPUs (repeatable or a comma list; any spelling)."),
    spot: Spot = spot_option("compare both"),
    community: bool = typer.Option(True, "--community/--no-community", help="Allow community-cloud hosts."),
    speedups: bool = typer.Option(True, "--speedups/--no-speedups", help="Turn on the speed options (Liger kernels, torch.compile) where they pay: NVIDIA boards of compute capability 8.0+."),
    max_gpus: int = typer.Option(8, "--max-gpus", callback=bounded(1, 4096), help="Most GPUs in all (per node x nodes); several GPUs are tried "
                                 "only when a method fits no single GPU, misses --deadline or --budget on one, or with --optimize time."),
    network: str | None = network_option(None, "Between nodes, for options on several (--max-gpus 16 or more): "
                                         "ethernet (assumed when not given: the price files do not say), "
                                         "infiniband, a rate per node like 100gbit, or an instance type with a "
                                         "stated rate (g5.48xlarge)."),
    headroom: float = typer.Option(0.10, "--headroom", callback=bounded(0, 0.9), help="Fraction of GPU memory kept free."),
    optimize: str = typer.Option("cost", "--optimize", help="Rank by cost (total $) or time (hours)."),
    objective: str = typer.Option("sft", "--objective", help="sft (default) | dpo | orpo (preference pairs in the data) | grpo (RL: prompts in the data)."),
    prompts: int | None = typer.Option(None, "--prompts", callback=bounded(1, 10**12), help="grpo: prompts in the data (instead of a prompt file)."),
    steps: int | None = typer.Option(None, "--steps", callback=bounded(1, 10**9), help="grpo: optimizer steps (default: --epochs over the prompts)."),
    generations: int = typer.Option(8, "--generations", callback=bounded(2, 4096), help="grpo: completions per prompt."),
    completion_len: int = typer.Option(256, "--completion-len", callback=bounded(1, 10**6), help="grpo: max_completion_length."),
    prompt_len: int = typer.Option(256, "--prompt-len", callback=bounded(1, 10**6), help="grpo: tokens per prompt."),
    beta: float = typer.Option(0.0, "--beta", callback=bounded(0, 100), help="grpo: KL weight (> 0 adds a reference model)."),
    expected_len: int = typer.Option(None, "--expected-completion-len", callback=bounded(1, 10**6), help="grpo: tokens your completions typically reach (default: --completion-len, the pessimistic end)."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows", help="Count the dataset without its bad rows "
                                       "(as `train --skip-bad-rows` trains it)."),
    top: int = typer.Option(8, "--top", callback=bounded(1, 10**4), help="Options to show."),
    as_json: bool = json_option("the plan"),
    markdown: bool = typer.Option(False, "--markdown", help="Print the plan as Markdown."),
    wide: bool = typer.Option(False, "--wide", help="Every column of the table, however narrow the terminal."),
    progress: bool = typer.Option(False, "--progress", help="Say what is being computed on stderr even under --json "
                                  "or when stderr is not a terminal (shown by default in a terminal)."),
    save: Path | None = typer.Option(None, "--save", parser=path, help="Write the plan file for train/launch (YAML)."),
    maximize: str | None = typer.Option(None, "--maximize", help="With --budget: plan the most epochs, or the "
                                        "largest share of the data (tokens), that the budget buys."),
    prices: str = typer.Option("cache", "--prices", help="bundled (the shipped snapshot), cache (newest source "
                               "per provider, the default) or live (run `prices refresh` first)."),
    no_calibration: bool = typer.Option(False, "--no-calibration", help="Ignore the factors `cheaptune calibrate` "
                                        "fitted from past runs (and their spread for the p10-p90 interval)."),
) -> None:
    """Rank method x GPU x provider x spot by total cost (or time) and explain the choice."""
    import dataclasses

    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.catalog.models import loadable_name, resolve_model
    from cheaptune.errors import BadInput, Infeasible
    from cheaptune.estimate.time.throughput import ModelShape
    from cheaptune.plan import planfile, render, sources
    from cheaptune.plan.planner import make_plan
    from cheaptune.plan.save import to_planfile
    from cheaptune.plan.workload import Constraints, check_providers, parse_methods

    if (model_opt is not None or config is not None) and model_arg is not None and dataset is None \
            and Path(model_arg).is_file():
        model_arg, dataset = None, Path(model_arg)  # `plan --model M data.jsonl`: the one positional is the data
    if data is not None:
        if dataset is not None:
            raise BadInput("give the dataset once: `--data PATH` or the positional DATA, not both")
        dataset = data
    # a flag that only means something beside another is refused alone, not ignored
    refuse_alone(ctx, GRPO_ONLY, objective.lower() == "grpo", "--objective grpo", "GRPO settings, unused by an SFT, DPO "
                 "or ORPO plan; drop or add it")
    refuse_alone(ctx, ("avg_tokens",), examples is not None, "--examples N", "it is their average length (with "
                 "--tokens or a dataset the tokens are known); drop it or give --examples instead")
    if objective.lower() == "grpo":  # an RL run: cli/grpo.py (--effective-batch counts completions)
        if lora_targets is not None:
            raise BadInput("--lora-targets is not planned for --objective grpo (it sizes all-linear); drop it")
        if network is not None:
            raise BadInput("--network is not planned for --objective grpo (it plans one node); drop it")
        if unread := typed(ctx, *NOT_GRPO):
            raise BadInput(f"{', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not planned for --objective grpo "
                           "(it ranks GPU x count x generator placement for the prompts, --budget and --gpu); drop "
                           f"{'it' if len(unread) == 1 else 'them'}")
        from cheaptune.cli.grpo import RlFlags, plan_grpo_command

        return plan_grpo_command(_one_model(model_arg, model_opt), dataset, prompts, steps, epochs, effective_batch,
                                 method, lora_r, RlFlags(generations, completion_len, prompt_len, beta,
                                 expected_len=expected_len), budget, gpu,
                                 max_gpus, headroom, top, prices, as_json)
    foreign, flag_targets = None, lora_targets  # a config's key may set lora_targets below; the flag is checked
    if config is not None:
        if network is not None:
            raise BadInput("--network is not planned with --config (it plans the config's run on one GPU); drop it")
        from cheaptune.plan.config_run import read_run

        foreign = read_run(config, trainer, save is not None, versions, model=model_opt or model_arg, seq_len=seq_len,
                           lora_r=lora_r, epochs=epochs, effective_batch=effective_batch, lora_targets=lora_targets)
        model, seq_len, lora_r = str(foreign.request.model), foreign.request.seq_len, foreign.request.lora_r
        lora_targets = foreign.request.lora_targets
        epochs, effective_batch = foreign.epochs, foreign.effective_batch
        method = foreign.request.method if method is None else method
        dataset = dataset or (Path(foreign.dataset) if foreign.dataset else None)
        missing = foreign.missing_dataset_error(config)
        if dataset is None and tokens is None and examples is None and missing is not None:
            raise missing
    elif trainer is not None or versions is not None:
        raise BadInput(f"{'--trainer' if trainer is not None else '--versions'} needs --config (a plan without one "
                       "sizes what `cheaptune train` runs)")
    else:
        model = _one_model(model_arg, model_opt)
    refuse_alone(ctx, ("skip_bad_rows",), dataset is not None, "a dataset file (--data)", "it leaves the file's bad "
                 "rows out of the count; drop it with --tokens or --examples")
    refuse_alone(ctx, ("lora_r", "lora_targets"), method is None or parse_methods(method) != ("full",),
                 "an adapter method (lora, qlora, dora)",
                 "--method full trains every weight and builds no adapter; drop it or add the method")
    lora_r, epochs = lora_r or 16, epochs or 1.0
    effective_batch = effective_batch or 16
    if save is not None:
        from cheaptune.util.atomic import destination

        destination(save)  # a folder or device as --save fails now, not after the plan is made
    constraints = Constraints(
        methods=parse_methods("auto" if method is None else method), budget_usd=budget, deadline_hours=deadline,
        providers=names_given("--provider", _given(providers), "cheaptune prices"),
        exclude_providers=names_given("--exclude-providers", _given(exclude_providers), "cheaptune prices"),
        spot=spot.lower(), community=community,
        max_gpus=1 if foreign else max_gpus, headroom=headroom, optimize=optimize.lower(), top=top, lora_r=lora_r,
        speedups=(foreign.speed_options if speedups else ()) if foreign else speedups,  # a config's own options
        gpus=tuple(resolve_gpu(g).name for g in names_given("--gpu", gpu)),
    ).validate()
    spec = resolve_model(model)
    if flag_targets is not None:  # an unknown module name is one line and exit 2, before any fit
        from cheaptune.catalog.models import to_hf_config
        from cheaptune.estimate.memory.targets import resolve_targets

        resolve_targets(to_hf_config(spec), flag_targets)
    context = spec.config.get("max_position_embeddings")
    if seq_len is None:  # not given: 2048, or the whole context of a model whose context is shorter
        seq_len = min(DEFAULT_SEQ_LEN, context or DEFAULT_SEQ_LEN)
    elif context and seq_len > context:
        raise BadInput(f"--seq-len {seq_len} is beyond {spec.id}'s context of {context} tokens; lower it")
    from cheaptune.cli.output import progress_wanted, status

    with status(progress_wanted(progress, as_json), f"counting tokens in {dataset}" if dataset else "planning"):
        workload = sources.build_workload(spec, str(dataset) if dataset else None, _whole(tokens, "--tokens"),
                                          _whole(examples, "--examples"), avg_tokens, epochs, seq_len, effective_batch,
                                          objective.lower(), skip_bad_rows)
    workload = dataclasses.replace(workload, lora_targets=lora_targets, network=network)  # sized, timed, saved
    shape = ModelShape.from_config(spec.config, spec.params)
    gpu_list, offers = sources.load_catalog(prices.lower())
    check_providers(constraints, (o.provider for o in offers))
    if foreign is None:
        points = sources.shared_points(spec, workload.seq_len, lora_r, workload.objective,
                                       lora_targets)  # one estimate per point
        fit = sources.real_fit(spec, workload.seq_len, constraints.headroom, lora_r, workload.effective_batch,
                               workload.effective_batch, workload.objective, workload.epochs, points, lora_targets)
        multi_fit = sources.real_multi_fit(spec, workload.seq_len, constraints.headroom, lora_r,
                                           workload.effective_batch, workload.objective, workload.epochs, points,
                                           lora_targets)
    else:  # the config's own run on one GPU (its micro-batch, checkpointing and trainer)
        from cheaptune.plan.config_run import config_fit, epochs_for

        fit, multi_fit = config_fit(foreign, constraints.headroom), None
        workload = dataclasses.replace(workload, epochs=epochs_for(foreign, workload.tokens, seq_len)).validate()

    ahead = getattr(fit, "ahead", None)  # the fits named ahead run on every core (plan.parallel)

    def run(c: Constraints, w) -> object:
        return make_plan(spec.id, shape, context, w, c, gpu_list, offers, fit, multi_fit=multi_fit, ahead=ahead)

    try:
        with status(progress_wanted(progress, as_json), f"sizing {spec.id} on each GPU") as say:
            fit, multi_fit = _announced(fit, multi_fit, spec.id, say)
            if maximize is None:
                result = run(constraints, workload)
            else:
                from cheaptune.plan.budget import plan_for_budget

                result = plan_for_budget(run, constraints, workload, maximize.lower(), shape)
    except Infeasible as err:
        partial = getattr(err, "result", None)
        if partial is not None:
            _show(partial, as_json, markdown, render, wide)
        raise
    _add_price_age(result, prices.lower())
    if foreign is not None:
        from cheaptune.plan.config_run import notes

        result.notes += notes(foreign, result.recommended)
    shown, result = _calibrated(result, no_calibration)
    if save is not None:  # built (and refused, in one line) before anything is shown
        data = str(Path(dataset).resolve()) if dataset else None
        saved = to_planfile(result, loadable_name(model, spec), data, label=model,
                            fields=foreign.settings if foreign else None)
    _show(shown, as_json, markdown, render, wide)
    if save is not None:
        planfile.save(saved, save)
        if not as_json:
            typer.echo(f"plan saved to {save}", err=True)


def _announced(fit, multi_fit, model: str, say):
    """The fit functions, each call first saying which candidate it sizes (a cold one simulates the model)."""
    def one(method, mem, precision):
        say(f"{model}: {method} ({precision}) on a {mem / 2**30:.0f} GiB GPU (simulating training steps; cached after)")
        return fit(method, mem, precision)

    def many(method, mem, gpus, sharding, offload, precision):
        say(f"{model}: {method} ({precision}) on {gpus}x {mem / 2**30:.0f} GiB, {sharding}{' +offload' if offload else ''}")
        return multi_fit(method, mem, gpus, sharding, offload, precision)

    return one, (many if multi_fit is not None else None)


def _calibrated(result, off: bool):
    """(result to show: calibrated, with p10-p90; result to save: the model's figures in the same order)."""
    from cheaptune.plan.calibrated import add_intervals, apply
    from cheaptune.runs.calibration import load

    factors = {} if off else load()
    shown, raw = apply(result, factors) if factors else (result, result)
    add_intervals(shown, factors)
    return shown, raw


def _whole(value: float | None, flag: str) -> int | None:
    """Counts may be written 1e6; they must still be whole numbers."""
    from cheaptune.errors import BadInput

    if value is None:
        return None
    if value != int(value):
        raise BadInput(f"{flag} must be a whole number; got {value:g}")
    return int(value)


def _given(value: str | None) -> list[str] | None:
    return None if value is None else [value]


def _one_model(positional: str | None, option: str | None) -> str:
    from cheaptune.errors import BadInput

    if (positional is None) == (option is None):
        raise BadInput("give the model once: `cheaptune plan MODEL ...` or `cheaptune plan --model MODEL ...`")
    model = positional if positional is not None else option
    if not model or not model.strip():
        raise BadInput("the model is empty; give a catalog name, hub id, config.json or model folder "
                       "(`cheaptune models` lists the catalog)")
    return model  # type: ignore[return-value]


def _add_price_age(result, prices: str) -> None:
    """Each shown provider's price age in the notes; a warning past a week."""
    from datetime import date

    from cheaptune.catalog.sources.live_cache import read_meta
    from cheaptune.plan.price_age import price_age

    notes, warnings = price_age(result.options[: result.constraints.top], date.today(), read_meta() is not None, prices)
    result.notes += notes
    result.warnings += warnings


def _show(result, as_json: bool, markdown: bool, render, wide: bool) -> None:
    if as_json:
        from cheaptune.cli.output import emit_json

        emit_json(render.to_json(result))
    elif markdown:
        typer.echo(render.to_markdown(result))
    else:
        from cheaptune.cli.output import console

        render.print_rich(result, console(), wide)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
