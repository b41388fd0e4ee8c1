"""`cheaptune estimate`: peak training VRAM for a model, method and batch, and which GPUs it fits."""

from __future__ import annotations

import typer

from cheaptune.cli.checks import bounded, nonempty, refuse_alone
from cheaptune.cli.vocab import network_option

GIB = 2**30
GRPO_ONLY = ("generations", "completion_len", "prompt_len", "beta", "generation_backend", "vllm_memory", "expected_len")
ADAPTER_ONLY = ("lora_r", "lora_alpha", "lora_targets", "lora_dropout", "peft_autocast", "train_modules")
NEAR_LIMIT = 0.05  # fits, but with less than 5% of the GPU free beyond the headroom


def _render(est, gpus, headroom: float, factors: dict | None = None) -> None:
    """The breakdown and the GPU verdict; a GPU with a calibration factor for this method is judged on
    the calibrated peak (and says so)."""
    from rich.table import Table

    from cheaptune.cli.output import console

    out = console()
    parts = Table(title=f"{est.inputs['model']} {est.inputs['method']}: peak memory ({est.basis})")
    parts.add_column("part")
    parts.add_column("GiB", justify="right")
    for name, n in sorted(est.breakdown.items(), key=lambda kv: -kv[1]):
        parts.add_row(name.replace("_", " "), f"{n / GIB:.2f}")
    parts.add_row("peak allocated", f"{est.peak_allocated_bytes / GIB:.2f}", style="bold")
    parts.add_row("peak reserved", f"{est.peak_reserved_bytes / GIB:.2f}")
    parts.add_row("device total (nvidia-smi)", f"{est.device_total_bytes / GIB:.2f}", style="bold")
    out.print(parts)
    phases = ", ".join(f"{k} {v / GIB:.2f}" for k, v in est.phase_peaks.items())
    out.print(f"phase peaks (GiB): {phases}; params {est.total_params:,}, trainable {est.trainable_params:,}")
    rng = est.details.get("range")
    if rng:
        lo, hi = rng["device_total_bytes"]
        out.print(f"range: device total {lo / GIB:.2f}-{hi / GIB:.2f} GiB, peak allocated "
                  f"{rng['peak_allocated_bytes'][0] / GIB:.2f}-{rng['peak_allocated_bytes'][1] / GIB:.2f} GiB "
                  f"(+{rng['fraction']:.0%}: {rng['why']}; the GPU verdict uses the upper end)")
    verdict = Table(title=f"GPUs (keeping {headroom:.0%} headroom)")
    for col in ("GPU", "GiB", "fits", "free GiB"):
        verdict.add_column(col)
    for g in gpus:
        f = (factors or {}).get((g.name, est.inputs["method"]))
        need = est.device_total_bytes * (f.memory if f and f.memory else 1.0)
        free = g.memory_bytes * (1 - headroom) - need
        # under-prediction is the costly direction (an OOM after the GPU is rented): flag thin margins
        fits = ("yes, near its limit" if free < NEAR_LIMIT * g.memory_bytes else "yes") if free >= 0 else "no"
        verdict.add_row(g.name, f"{g.memory_gib:.0f}", fits, f"{free / GIB:.1f}",
                        style=None if free >= 0 else "dim")
    out.print(verdict)
    for f in sorted({f for (_, m), f in (factors or {}).items() if m == est.inputs["method"]}, key=lambda f: f.gpu):
        out.print(f"{f.gpu}: {f.note()}, peak x{f.memory or 1:.3f} (--no-calibration to ignore)")


def _with_speedups(t, gpu, method: str) -> dict:
    """The speed options a plan turns on for `method` on `gpu` (estimate.speedups.for_gpu: measured there only)
    and the tokens/s with them: the step time alone is without them, so `estimate` and `plan` would otherwise
    disagree by their factor."""
    from cheaptune.estimate.time.speedups import describe, describe_unmeasured, for_gpu

    fast = for_gpu(gpu, method)
    return {"options": list(fast.options), "factor": round(fast.factor, 4),
            "tokens_per_s": t.tokens_per_s * fast.factor, "line": describe(fast),
            "unmeasured_line": describe_unmeasured(fast, method, gpu)}


def _render_time(t, gpu: str, nodes: int, fast: dict, network: str = "ethernet") -> None:
    """One line of speed and the step's parts (seconds per optimizer step), and one with the plan's speed options."""
    from cheaptune.cli.output import console

    where = f"{t.gpus // nodes}x {gpu}" + (f" x {nodes} nodes over {network}" if nodes > 1 else "")
    parts = ", ".join(f"{k} {v:.3f}" for k, v in t.parts.items() if v)
    console().print(f"time on {where}: {t.tokens_per_s:,.0f} tokens/s without speed options, {t.step_seconds:.3f} s "
                    f"per optimizer step, MFU {t.mfu:.0%} (parts, s/step: {parts})")
    if fast["options"]:
        console().print(f"with the speed options a plan turns on for {gpu}: {fast['tokens_per_s']:,.0f} tokens/s "
                        f"({fast['line']})")
    else:
        console().print(f"a plan turns on no speed options for {gpu}: the same {t.tokens_per_s:,.0f} tokens/s")
    if fast.get("unmeasured_line"):
        console().print(fast["unmeasured_line"])


def _origins(req, trainer: str | None, versions: str | None) -> dict[str, str]:
    """library -> where the version modelled came from: 'flag' (--versions, --trainer NAME==X), 'config' (its
    versions: and trainer: keys), a pinned trainer release's pins, the profile's default release, or 'installed'
    (what the simulation runs: estimate/memory/versions.py library_versions)."""
    from cheaptune.estimate.memory.profiles import get_profile
    from cheaptune.estimate.memory.versions import SIMULATED, parse_pins, split_trainer

    prof, pins = get_profile(req.trainer), parse_pins(req.versions)
    flags = set(parse_pins(versions))
    if split_trainer(trainer)[1] is not None:
        flags.add(prof.package)
    release = pins.get(prof.package) if prof.package else None
    rest = f"{prof.name} {release}'s pins" if release else "default release"
    out = {lib: rest for lib in {*prof.libraries, *([prof.package] if prof.package else [])}}
    if not release:
        out.update({lib: "installed" for lib in SIMULATED if lib not in out})
    return {**out, **{lib: "flag" if lib in flags else "config" for lib in pins}}


def _notes(req, foreign, est, origins: dict[str, str]) -> None:
    """What the estimate took from a config file, the versions it modelled and where each came from, and what
    it could not simulate."""
    from cheaptune.cli.output import console
    from cheaptune.estimate.memory.profiles import get_profile

    out = console()
    prof = get_profile(req.trainer)
    out.print(f"trainer: {prof.name} ({prof.about}{', ' + prof.version if prof.version else ''})")
    if foreign and foreign.ignored:
        out.print(f"ignored by the memory estimate: {', '.join(foreign.ignored)}")
    if foreign and foreign.named:
        out.print(f"not modelled (they change the run): {', '.join(foreign.named)}")
    for term in prof.not_simulated:
        out.print(f"not simulated: {term}")
    ver = est.details.get("versions") or {}
    if ver:
        libs = ", ".join(f"{k}{v} ({origins.get(k, 'installed')})" for k, v in sorted(ver["libraries"].items()))
        on = ", ".join(k for k, v in ver["mechanisms"].items() if v) or "none"
        out.print(f"versions modelled: {libs}; version-dependent terms on: {on}")
    for line in ver.get("not_known", ()):
        out.print(f"version not known: {line}")


def _read_peft_config(path: str | None) -> str | None:
    """A saved adapter_config.json as the estimator's JSON text; one line when it cannot be read."""
    if path is None:
        return None
    import json
    from pathlib import Path

    from cheaptune.errors import BadInput

    try:
        return json.dumps(json.loads(Path(path).expanduser().read_text()))
    except (OSError, ValueError) as err:
        raise BadInput(f"--peft-config {path}: not a readable JSON file ({err}); pass an adapter_config.json "
                       "saved by PeftConfig.save_pretrained") from None


def request_from_options(*, config: str | None = None, trainer: str | None = None, versions: str | None = None,
                         peft_config: str | None = None, peft_autocast: bool | None = None, model: str | None = None,
                         method: str | None = None, micro_batch: int | None = None, seq_len: int | None = None,
                         precision: str | None = None, quant: str | None = None, loss: str | None = None,
                         lora_targets: str | None = None, lora_dropout: float | None = None, lora_r: int = 16,
                         lora_alpha: int = 32, grad_ckpt: bool | None = None, optimizer: str = "adamw", attn: str = "sdpa",
                         gpus: int = 1, sharding: str | None = None, offload: bool = False,
                         allow_long_context: bool = False, full_sim: bool = False, objective: str = "sft",
                         precompute_ref: bool = False, grad_accum: int = 1, train_modules: str | None = None):
    """(EstimateRequest, ForeignConfig | None) that `cheaptune estimate` makes of its options. The memory bench
    builds every row with it, so a bench figure is what a user gets from the same flags.

    `trainer` may name a release (litgpt==0.4.9): its version joins the `versions` pins (estimate/memory/versions.py).
    A config's `trainer:` and `versions:` keys are read too, the flags winning (plan.config_run.config_pins); a
    cheaptune config is read as `plan --config` reads it, the flags given winning over its settings."""
    import dataclasses

    from cheaptune.estimate.memory.versions import join_pins
    from cheaptune.plan.config_run import config_pins, is_own_config, read_run
    from cheaptune.plan.foreign_config import request_for
    from cheaptune.util.yamlfile import read_mapping

    raw = read_mapping(config, "config", "pass a cheaptune, Axolotl, LLaMA-Factory or litgpt YAML config") if config else {}
    name, pins, _ = config_pins(raw, config, trainer, versions)
    given = dict(model=model, method=method, micro_batch=micro_batch, seq_len=seq_len, precision=precision,
                 quant=quant, loss=loss, lora_targets=lora_targets, lora_dropout=lora_dropout, versions=join_pins(pins),
                 peft_config=_read_peft_config(peft_config), autocast_adapter_dtype=peft_autocast, grad_ckpt=grad_ckpt,
                 train_modules=train_modules)
    rest = dict(lora_r=lora_r, lora_alpha=lora_alpha, optimizer=optimizer, attn=attn, gpus=gpus,
                sharding=sharding, offload=offload, allow_long_context=allow_long_context, full_sim=full_sim,
                objective=objective.lower(), precompute_ref=precompute_ref, grad_accum=grad_accum)
    if config and is_own_config(raw, trainer):
        req = read_run(config, trainer, versions=versions, model=model, seq_len=seq_len).request
        layout = dict(gpus=gpus, sharding=sharding, offload=offload) if gpus != 1 or sharding else {}
        return dataclasses.replace(req, **{k: v for k, v in given.items() if v is not None}, **layout,
                                   full_sim=full_sim), None
    return request_for(config, name, given, rest)


def register(app: typer.Typer) -> None:
    @app.command("estimate")
    def estimate(
        ctx: typer.Context,
        model: str = typer.Option(None, "--model", callback=nonempty, help="Catalog name, hub id, config.json or local model folder."),
        method: str = typer.Option(None, "--method", help="full, lora, qlora, dora, ia3, prompt_tuning, prefix_tuning."),
        lora_r: int = typer.Option(16, "--lora-r", callback=bounded(1, 2**16), help="LoRA rank."),
        lora_alpha: int = typer.Option(32, "--lora-alpha", callback=bounded(1, 2**20), help="LoRA alpha."),
        lora_targets: str = typer.Option(None, "--lora-targets", help="Presets qv, attention, mlp, all-linear "
                                         "(+ lm_head) or module names (default: the trainer's)."),
        micro_batch: int = typer.Option(None, "--micro-batch", callback=bounded(1, 2**16), help="Sequences per GPU per step."),
        seq_len: int = typer.Option(None, "--seq-len", callback=bounded(1, 10**7), help="Tokens per sequence (packed)."),
        precision: str = typer.Option(None, "--precision", help="bf16-true, bf16-mixed, fp16-mixed, fp32 (default per method)."),
        quant: str = typer.Option(None, "--quant", help="nf4, or nf4-dq (qlora default: double quantization)."),
        grad_ckpt: bool | None = typer.Option(None, "--grad-ckpt/--no-grad-ckpt", help="Gradient checkpointing (default: "
                                       "the trainer's, e.g. on for unsloth and llama-factory)."),
        optimizer: str = typer.Option("adamw", "--optimizer", help="adamw (as the trainer builds it), adamw-fused, adamw-8bit, paged-adamw-8bit, sgd, adafactor."),
        attn: str = typer.Option("sdpa", "--attn", help="sdpa, flash, eager."),
        objective: str = typer.Option("sft", "--objective", help="sft, dpo, orpo: trl's training step for it "
                                      "(--micro-batch counts preference pairs); grpo: an RL step (needs --gpu; "
                                      "--micro-batch counts completions)."),
        generations: int = typer.Option(8, "--generations", callback=bounded(2, 4096), help="grpo: completions per prompt."),
        completion_len: int = typer.Option(256, "--completion-len", callback=bounded(1, 10**6), help="grpo: max_completion_length."),
        prompt_len: int = typer.Option(256, "--prompt-len", callback=bounded(1, 10**6), help="grpo: tokens per prompt."),
        beta: float = typer.Option(0.0, "--beta", callback=bounded(0, 100), help="grpo: KL weight (> 0 adds a reference model)."),
        generation_backend: str = typer.Option("vllm", "--generation-backend", help="grpo: vllm (colocated), vllm-server, transformers."),
        vllm_memory: float = typer.Option(None, "--vllm-gpu-memory-utilization", callback=bounded(0, 1, above=True), help="grpo: vLLM's share of a GPU (trl: 0.3 colocated, 0.9 server)."),
        expected_len: int = typer.Option(None, "--expected-completion-len", callback=bounded(1, 10**6), help="grpo: tokens your completions typically reach (default: --completion-len, the pessimistic end)."),
        precompute_ref: bool = typer.Option(False, "--precompute-ref", help="dpo: reference log-probs computed "
                                            "before training (no reference copy for full fine-tuning)."),
        loss: str = typer.Option(None, "--loss", help="Override the trainer's loss: trl (chunked LM head), hf (full fp32 logits), chunked."),
        trainer: str = typer.Option(None, "--trainer", help="Whose training step to simulate: cheaptune (default), hf, "
                                    "axolotl, llama-factory, litgpt, torchtune; NAME==VERSION for a release "
                                    "(litgpt==0.4.9: its pinned libraries), else its current one; wins over "
                                    "the config's trainer: key."),
        versions: str = typer.Option(None, "--versions", help="Library versions of the run, e.g. "
                                     "bitsandbytes==0.42.0,torch==2.1.0: they pick the version-dependent terms "
                                     "(an unknown one takes the heavier side, said in the output); each wins over "
                                     "the same library in the config's versions: key."),
        peft_config: str = typer.Option(None, "--peft-config", help="A saved adapter_config.json: the adapter "
                                        "built (any PEFT method); use with --method lora (qlora for a 4-bit base)."),
        peft_autocast: bool = typer.Option(None, "--peft-autocast-adapter-dtype/--no-peft-autocast-adapter-dtype",
                                           help="peft get_peft_model's fp32 cast of the adapters (default: the "
                                           "trainer's)."),
        lora_dropout: float = typer.Option(None, "--lora-dropout", help="LoRA dropout (default: the trainer's)."),
        train_modules: str = typer.Option(None, "--train-modules", callback=nonempty, help="Whole modules trained "
                                          "beside a LoRA adapter (peft modules_to_save), e.g. embed_tokens,lm_head "
                                          "to learn new tokens: a trained copy of each, with its gradients and "
                                          "optimizer state."),
        config: str = typer.Option(None, "--config", callback=nonempty, help="A cheaptune, Axolotl, LLaMA-Factory or litgpt YAML config "
                                   "to estimate (its versions: and trainer: keys too); --versions, --trainer, --model, --method, "
                                   "--micro-batch, --seq-len, --precision, --quant, --loss, --lora-targets, "
                                   "--lora-dropout and --grad-ckpt win over its keys."),
        gpu: str = typer.Option(None, "--gpu", help="GPU to time the step on: adds the step time and tokens/s."),
        gpu_count: int = typer.Option(1, "--gpu-count", callback=bounded(1, 4096),
                                      help="Data-parallel GPUs (per node with --nodes); the estimate is per GPU."),
        nodes: int = typer.Option(1, "--nodes", callback=bounded(1, 1024), help="Nodes of --gpu-count GPUs each (with --gpu)."),
        network: str = network_option("ethernet", "Between --nodes: ethernet (25 Gbit/s), infiniband (400 Gbit/s "
                                      "class, RDMA), a rate per node over IP sockets like 100gbit, or an instance "
                                      "type with a stated rate (g5.48xlarge)."),
        grad_accum: int = typer.Option(1, "--grad-accum", callback=bounded(1, 10**6), help="Micro-steps per optimizer step: the gradients are held from one to the next (and, with --gpu, the step time)."),
        sharding: str = typer.Option(None, "--sharding",
                                     help="ddp (default with --gpu-count > 1), fsdp, zero2, zero3: how model state is split."),
        offload: bool = typer.Option(False, "--offload", help="fsdp/zero: keep sharded model state in host RAM."),
        allow_long_context: bool = typer.Option(False, "--allow-long-context",
                                                help="Allow --seq-len beyond the model's context length."),
        full_sim: bool = typer.Option(False, "--full-sim", help="Simulate every block instead of extrapolating."),
        headroom: float = typer.Option(0.10, "--headroom", callback=bounded(0, 0.9), help="Fraction of GPU memory kept free in the verdict."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        progress: bool = typer.Option(False, "--progress", help="Say what is being simulated on stderr even under "
                                      "--json or when stderr is not a terminal (shown by default in a terminal)."),
        no_calibration: bool = typer.Option(False, "--no-calibration",
                                            help="Ignore the per-GPU memory factors of `cheaptune calibrate`."),
    ) -> None:
        """Predict peak GPU memory of a training step by simulating it on fake tensors (per GPU with --gpu-count N)."""
        from cheaptune.catalog.gpus import resolve_gpu
        from cheaptune.estimate.memory.memory import estimate_memory

        grpo = objective.lower() == "grpo"  # an RL step: cli/grpo.py (--micro-batch counts completions)
        # a flag that only means something beside another is refused alone, not ignored
        refuse_alone(ctx, ("nodes",), gpu is not None, "--gpu", "nodes only change the step time; for the memory "
                     f"alone, --gpu-count {gpu_count * nodes} shards over the same GPUs")
        refuse_alone(ctx, ("network",), gpu is not None and nodes > 1, "--gpu and --nodes 2 or more", "it is the link "
                     "between nodes, which only the step time uses")
        refuse_alone(ctx, GRPO_ONLY, grpo, "--objective grpo", "GRPO settings, unused by an SFT, DPO or ORPO step; drop or add it")
        refuse_alone(ctx, ("no_calibration",), not grpo, "an SFT, DPO or ORPO step", "no calibration factor times or "
                     "sizes a GRPO step; drop it")
        refuse_alone(ctx, ("headroom", "no_calibration"), grpo or not as_json, "the GPU table (drop --json)",
                     "the JSON gives the estimate, not the GPU verdict")
        board = resolve_gpu(gpu) if gpu is not None else None  # an unknown GPU fails before the simulation
        if grpo:
            micro_batch, seq_len = micro_batch or generations, prompt_len + completion_len
        req, foreign = request_from_options(
            config=config, trainer=trainer, versions=versions, peft_config=peft_config, peft_autocast=peft_autocast,
            model=model, method=method, micro_batch=micro_batch, seq_len=seq_len, precision=precision, quant=quant,
            loss=loss, lora_targets=lora_targets, lora_dropout=lora_dropout, lora_r=lora_r, lora_alpha=lora_alpha,
            grad_ckpt=grad_ckpt, optimizer=optimizer, attn=attn, gpus=gpu_count * nodes, sharding=sharding,
            offload=offload, allow_long_context=allow_long_context, full_sim=full_sim,
            objective="sft" if grpo else objective, precompute_ref=precompute_ref, grad_accum=grad_accum,
            train_modules=train_modules)
        refuse_alone(ctx, ADAPTER_ONLY, req.method != "full", "an adapter method (--method lora, qlora, dora, ...)",
                     "a full fine-tune trains every weight and builds no adapter; drop it")
        if grpo:
            from cheaptune.cli.grpo import RlFlags, estimate_grpo

            flags = RlFlags(generations, completion_len, prompt_len, beta, generation_backend, vllm_memory,
                            expected_len=expected_len)
            return estimate_grpo(req, board, flags, grad_accum, headroom, as_json)
        from cheaptune.cli.output import progress_wanted, status

        with status(progress_wanted(progress, as_json), f"simulating two training steps of {model or config} ({req.method}; "
                                                        "cached after the first run)"):
            est = estimate_memory(req)
        timed = None
        if board is not None:
            from cheaptune.estimate.time.throughput import step_time_for

            timed = step_time_for(req, est.trainable_params, board, gpu_count, nodes, grad_accum, network)
            fast = _with_speedups(timed, board, req.method)
        if as_json:
            import dataclasses

            from cheaptune.cli.output import emit_json

            extra = {"config": dataclasses.asdict(foreign)} if foreign else {}
            if timed is not None:
                extra["time"] = {**timed.to_dict(), "gpu": board.name, "nodes": nodes, "network": network,
                                 "grad_accum": grad_accum, "speedups": fast}
            emit_json({**dataclasses.asdict(est), **extra})
            return
        _notes(req, foreign, est, _origins(req, trainer, versions))
        if timed is not None:
            _render_time(timed, board.name, nodes, fast, network)
        from cheaptune.catalog.gpus import list_gpus
        from cheaptune.runs.calibration import load

        _render(est, sorted(list_gpus(), key=lambda g: g.memory_bytes), headroom, {} if no_calibration else load())
