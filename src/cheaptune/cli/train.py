"""`cheaptune train`: fine-tune from a YAML config (Axolotl keys), a plan file and flags (flags win)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperCommand

from cheaptune.cli.checks import bounded, nonempty, path
from cheaptune.cli.vocab import (
    budget_option,
    checkpoint_dir_option,
    force_option,
    gpu_count_option,
    json_option,
)


def bare_resume(args: list[str]) -> list[str]:
    """`--resume` alone means `--resume auto`: when nothing follows it, an option does, or a file (the config)."""
    out = list(args)
    if "--resume" in out:
        i = out.index("--resume") + 1
        value = out[i] if i < len(out) else None
        if value is None or value.startswith("-") or Path(value).is_file():
            out.insert(i, "auto")
    return out


class _TrainCommand(TyperCommand):
    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201 - click's signature
        return super().parse_args(ctx, bare_resume(args))


def register(app: typer.Typer) -> None:
    app.command("train", cls=_TrainCommand)(train)


def train(
    config: Path = typer.Argument(None, parser=path, help="Training config YAML (Axolotl-style keys; HF names as aliases)."),
    plan: Path = typer.Option(None, "--plan", parser=path, help="Plan file from `cheaptune plan --save`: method, batch, price."),
    model: str = typer.Option(None, "--model", callback=nonempty, help="Base model: local folder or hub id."),
    data: list[str] = typer.Option(None, "--data", callback=nonempty, help="Dataset file or folder (repeatable); replaces the config's."),
    data_format: str = typer.Option(None, "--format", help="Dataset format: auto, messages, sharegpt, alpaca, ..."),
    method: str = typer.Option(None, "--method", help="full | lora | qlora | dora | ia3 | prompt_tuning | prefix_tuning"),
    objective: str = typer.Option(None, "--objective", help="sft (default) | dpo | orpo (preference pairs in --data) | kto (rated completions) | grpo (prompts)."),
    reward: list[str] = typer.Option(None, "--reward", callback=nonempty, help="grpo: exact_match | numeric | regex | json | length | path/to/rewards.py (repeatable)."),
    answer_column: str = typer.Option(None, "--answer-column", help="grpo: the column exact_match/numeric compare with."),
    generations: int = typer.Option(None, "--generations", callback=bounded(2, 2**16), help="grpo: completions per prompt."),
    completion_len: int = typer.Option(None, "--completion-len", callback=bounded(1, 10**7), help="grpo: tokens per completion."),
    generation_backend: str = typer.Option(None, "--generation-backend", help="grpo: auto | vllm | vllm-server | transformers."),
    lora_r: int = typer.Option(None, "--lora-r", callback=bounded(1, 2**16), help="LoRA rank."),
    lora_targets: str = typer.Option(None, "--lora-targets", help="qv | attention | mlp | all-linear, +lm_head"),
    output_dir: str = typer.Option(None, "--output-dir", "-o", callback=nonempty, help="Where the adapter and summary go."),
    checkpoint_dir: str = checkpoint_dir_option("Checkpoints folder (e.g. a mounted bucket)."),
    resume: str = typer.Option(None, "--resume", callback=nonempty, help="auto (default; --resume alone) | never | path to checkpoint-N."),
    max_steps: int = typer.Option(None, "--max-steps", callback=bounded(1, 10**9), help="Stop after this many optimizer steps."),
    epochs: float = typer.Option(None, "--epochs", callback=bounded(0, 1000, above=True), help="Number of epochs."),
    micro_batch: int = typer.Option(None, "--micro-batch", callback=bounded(1, 2**16), help="Per-device micro-batch size."),
    grad_accum: int = typer.Option(None, "--grad-accum", callback=bounded(1, 2**16), help="Gradient accumulation steps."),
    seq_len: int = typer.Option(None, "--seq-len", callback=bounded(8, 10**7), help="Sequence length (tokens)."),
    learning_rate: float = typer.Option(None, "--lr", callback=bounded(0, 10, above=True), help="Learning rate."),
    save_steps: int = typer.Option(None, "--save-steps", callback=bounded(1, 10**9), help="Checkpoint every N steps."),
    save_minutes: float = typer.Option(None, "--save-minutes", callback=bounded(0, 1e6, above=True), help="Checkpoint every N minutes of wall clock."),
    save_total_limit: int = typer.Option(None, "--keep", callback=bounded(1, 10**6), help="Keep the last K checkpoints (and the best)."),
    val_set_size: float = typer.Option(None, "--val-set-size", callback=bounded(0, 1e9), help="Validation fraction (<1) or rows (>=1)."),
    eval_steps: int = typer.Option(None, "--eval-steps", callback=bounded(1, 10**9), help="Evaluate every N steps."),
    seed: int = typer.Option(None, "--seed", callback=bounded(0, 2**32 - 1), help="Random seed."),
    merge: bool = typer.Option(None, "--merge/--no-merge", help="Also write merged weights (safetensors)."),
    skip_bad_rows: bool = typer.Option(None, "--skip-bad-rows", help="Skip and count bad dataset rows."),
    budget_usd: float = budget_option("Stop (resumably) at this many USD."),
    price_per_hour: float = typer.Option(None, "--price-per-hour", callback=bounded(0, 1e5), help="Instance price for the cost meter."),
    max_hours: float = typer.Option(None, "--max-hours", callback=bounded(0, 1e6, above=True), help="Stop (resumably) after this many hours."),
    spot_notice: str = typer.Option(None, "--spot-notice", help="Poll spot notices: none | aws | gcp | azure."),
    device: str = typer.Option(None, "--device", help="auto | cpu | cuda."),
    precision: str = typer.Option(None, "--precision", help="bf16-true | bf16-mixed | fp16-mixed | fp32 (default: per method)."),
    gpus: int = gpu_count_option("GPUs on this machine (default: the plan's, else 1); > 1 relaunches under accelerate."),
    sharding: str = typer.Option(None, "--sharding", help="With --gpu-count > 1: ddp | fsdp | zero2 | zero3 (default: the plan's, else ddp)."),
    report_to: str = typer.Option(None, "--report-to", help="tensorboard,wandb,mlflow or none (default: tensorboard when installed)."),
    eval_after: bool = typer.Option(None, "--eval-after/--no-eval-after", help="Score tuned vs base on held-out data at the end."),
    on_finish: str = typer.Option(None, "--on-finish", help="After the run: nothing | stop | terminate."),
    dry_run_shutdown: bool = typer.Option(None, "--dry-run-shutdown", help="Print the on-finish command only."),
    probe_steps: int = typer.Option(None, "--probe-steps", help="Optimizer steps measured at the start (default 3; 0: none)."),
    allow_optimizer_change: bool = typer.Option(None, "--allow-optimizer-change",
                                                help="Out of memory: may switch to the paged 8-bit AdamW."),
    force: bool = force_option("Start and train on to the cap even when the cost (planned or projected from the "
                               "measured pace) is over the budget."),
    as_json: bool = json_option("the training summary"),
) -> None:
    """Fine-tune a model; checkpoints are atomic and a rerun resumes exactly where it stopped.

    Exit codes: 0 done, 2 bad input, 3 the plan's cost is over the budget before it starts (--force starts
    anyway), 10 budget or time cap, or a projection over the budget (--force trains on to the cap), 11 out of
    memory after every fallback (a larger GPU resumes it), 143 preempted (run again to resume).
    """
    import os
    import subprocess
    import sys

    started_at = _process_started() if _own_process(sys.argv) else None  # the meter's start (None: train begin)

    from cheaptune.errors import BadInput, CheaptuneError
    from cheaptune.train.config import build
    from cheaptune.train.distributed import EXIT_FILE, children_exit, is_child, launch_argv, record_exit
    from cheaptune.train.lock import output_lock

    gpus, sharding = _gpus_and_sharding(plan, gpus, sharding)
    if gpus < 1:
        raise BadInput(f"--gpu-count must be >= 1 (got {gpus})")
    child = is_child()
    world = int(os.environ.get("WORLD_SIZE", "1")) if child else gpus

    overrides = {
        "base_model": model, "method": method, "objective": objective, "lora_r": lora_r, "lora_targets": lora_targets,
        "output_dir": output_dir, "checkpoint_dir": checkpoint_dir, "resume": resume, "max_steps": max_steps,
        "num_epochs": epochs, "micro_batch_size": micro_batch, "gradient_accumulation_steps": grad_accum,
        "sequence_len": seq_len, "learning_rate": learning_rate, "save_steps": save_steps,
        "save_minutes": save_minutes, "save_total_limit": save_total_limit, "val_set_size": val_set_size,
        "eval_steps": eval_steps, "seed": seed, "merge": merge, "skip_bad_rows": skip_bad_rows,
        "budget_usd": budget_usd, "price_per_hour": price_per_hour, "max_hours": max_hours,
        "spot_notice": spot_notice, "device": device, "on_finish": on_finish,
        "dry_run_shutdown": dry_run_shutdown, "precision": precision, "probe_steps": probe_steps,
        "allow_optimizer_change": allow_optimizer_change, "report_to": report_to,
        "eval_after": eval_after,
        "reward": (reward[0] if len(reward) == 1 else reward) if reward else None, "answer_column": answer_column,
        "num_generations": generations, "max_completion_length": completion_len,
        "generation_backend": generation_backend,
        # the meter's price stays per instance; the GPU count is what the registry records (with a plan: the
        # count this run really uses, so a plan sized for more GPUs keeps its batch: planmerge.keep_batch)
        "gpu_count": world if world > 1 or plan is not None else None,
    }
    if data:
        overrides["datasets"] = [{"path": p, "type": data_format or "auto"} for p in data]
    cfg = build(config, plan, overrides)
    if not child:  # the Axolotl keys it ignores or trains its own way, and how the plan was adapted, said once
        for line in [*cfg.foreign_notes(f"config file {config}"), *cfg._plan_notes, *cfg.version_notes()]:
            typer.echo(line, err=True)
    if plan is not None and not child:
        from cheaptune.train.plancheck import check_plan_overrides

        check_plan_overrides(cfg, plan, force)
        from cheaptune.runs.billed import against_plan

        cfg, billed = against_plan(cfg, plan)  # metered above the plan's rate: said, re-projected (issue 29)
        if billed:
            typer.echo(billed, err=True)
    if data_format and not data:
        cfg = cfg.model_copy(update={"datasets": [d.model_copy(update={"type": data_format}) for d in cfg.datasets]})
    from cheaptune.data.readers import iter_rows
    from cheaptune.train.preflight import preflight

    if not child:
        preflight(cfg, force)  # over budget: refused (exit 3) before the model is looked for or N processes start
    for d in cfg.datasets:  # a missing file or a folder named like one, said before transformers loads (lazy: reads nothing)
        iter_rows(d.path)
    from cheaptune.train.config import check_before_load
    from cheaptune.train.run import train as run_train

    check_before_load(cfg)  # guard rails, optimizer/scheduler names, merge: what doctor and launch check too
    if cfg.base_model:
        from cheaptune.train.locate import check_base_model

        check_base_model(cfg.base_model)  # a missing folder or uncached hub id, said before any load
    with output_lock(cfg.output_dir, enabled=not child):  # the parent holds it for its children
        if gpus > 1 and not child:
            argv = launch_argv(_train_args(sys.argv), gpus, sharding, cfg.output_dir, cfg.device)
            Path(cfg.output_dir, EXIT_FILE).unlink(missing_ok=True)
            raise typer.Exit(children_exit(cfg.output_dir, subprocess.run(argv).returncode))
        try:
            result = run_train(cfg, force=force, started_at=started_at)
        except CheaptuneError as err:
            if child:
                record_exit(cfg.output_dir, err.exit_code)
            raise
    if not result.summary:  # not the main process of a multi-process run: it reports nothing
        return
    if as_json:
        from cheaptune.cli.output import emit_json

        emit_json(result.summary)
    else:
        from cheaptune.train.outputs import loss_text

        s = result.summary
        saved = "model" if cfg.method == "full" else "adapter"  # a full fine-tune saves the whole model
        run = f" (run {s['run_id']}: cheaptune report {s['run_id']})" if s.get("run_id") else ""
        typer.echo(f"done: {s['steps']} steps, {s['tokens']} tokens, final loss {loss_text(s['final_train_loss'])}"
                   f"{run}; {saved} and summary in {result.output_dir}")


def _gpus_and_sharding(plan: Path | None, gpus: int | None, sharding: str | None) -> tuple[int, str]:
    """Flags win; else a single-node plan's GPU count and sharding (multi-node plans start under torchrun,
    one process per GPU, so each process is already a child); else one GPU, DDP."""
    if plan is not None and (gpus is None or sharding is None):
        from cheaptune.plan.planfile import load

        p = load(plan)
        if gpus is None and p.offer.num_nodes == 1:
            gpus = p.offer.gpu_count
        sharding = sharding or p.train.sharding
    return (1 if gpus is None else gpus), sharding or "ddp"


def _own_process(argv: list[str]) -> bool:
    """Is this process `cheaptune train` (its start-up then billed), not a caller running the CLI in-process?"""
    return Path(argv[0]).name in ("cheaptune", "__main__.py") and argv[1:2] == ["train"]


def _process_started() -> float:
    """This process's start on the time.monotonic() clock (psutil, which accelerate requires, knows it)."""
    import time

    import psutil

    return time.monotonic() - max(time.time() - psutil.Process().create_time(), 0.0)


def _train_args(argv: list[str]) -> list[str]:
    """This command's own arguments (after `train`), to hand on to the child processes."""
    return argv[argv.index("train") + 1:] if "train" in argv else argv[2:]
