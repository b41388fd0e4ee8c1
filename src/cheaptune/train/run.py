"""`cheaptune train` as a library call: validate -> load -> resume -> train -> outputs, top to bottom."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from cheaptune.errors import BadInput, BudgetStop, OutOfMemory, Preempted
from cheaptune.runs import ledger
from cheaptune.train import checkpoints as ck
from cheaptune.train import guardrails, oom, outputs
from cheaptune.train import resume as rs
from cheaptune.train.config import TrainConfig, check_merge
from cheaptune.train.preflight import preflight
from cheaptune.train.tracking import resolve_report_to

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    output_dir: Path
    summary: dict[str, Any]
    resumed_from: Path | None


def _check(cfg: TrainConfig) -> None:
    if not cfg.base_model:
        raise BadInput("no base model: set base_model in the config or pass --model")
    if not cfg.datasets:
        raise BadInput("no dataset: set datasets: [{path: ...}] in the config or pass --data")
    check_merge(cfg)
    resolve_report_to(cfg.report_to)  # an unknown or missing tracker fails before any model loads


def load_data(cfg: TrainConfig) -> tuple[Any, Any, str]:
    """(train, eval or None, format); several files must share one format."""
    from datasets import concatenate_datasets

    from cheaptune.data import load_dataset_rows, validation_split

    loaded = [load_dataset_rows(d.path, d.type, skip_bad_rows=cfg.skip_bad_rows, objective=cfg.objective)
              for d in cfg.datasets]
    fmts = {x.fmt for x in loaded}
    if len({tuple(x.dataset.column_names) for x in loaded}) > 1:
        raise BadInput(f"datasets have different formats ({', '.join(sorted(fmts))}); train on one format at a time")
    for d, x in zip(cfg.datasets, loaded, strict=True):
        if x.n_bad:
            print(f"skipped {x.n_bad} bad rows in {d.path}", flush=True)
    ds = loaded[0].dataset if len(loaded) == 1 else concatenate_datasets([x.dataset for x in loaded])
    train, evals = validation_split(ds, cfg.val_set_size, cfg.seed)
    return train, evals, "messages" if "messages" in ds.column_names else loaded[0].fmt


def _spot_poller(cfg: TrainConfig, flag: Any):
    if cfg.spot_notice == "none":
        return None
    from cheaptune.train.pollers import make_poller

    return make_poller(cfg.spot_notice, on_notice=lambda why: flag.set(why), url=cfg.spot_notice_url,
                       interval_s=cfg.spot_poll_seconds).start()


class _Finisher:
    """Final registry status and the on-finish hook, on the main process only (run is None elsewhere)."""

    def __init__(self, cfg: TrainConfig, run: Any) -> None:
        self.cfg, self.run = cfg, run

    def __call__(self, status: str, hook: bool = True, **fields: Any) -> None:
        if self.run is None:
            return
        self.run.finish(status, **fields)
        if hook:
            guardrails.finish_hook(self.cfg, status)


def train(cfg: TrainConfig, force: bool = False, callbacks: tuple[TrainerCallback, ...] = (),
          started_at: float | None = None) -> TrainResult:
    """Train to the end (exit 0), or stop resumably: Preempted (143), BudgetStop (10) or, out of memory
    after every fallback, OutOfMemory (11), after a checkpoint. `callbacks` are added to the Trainer's
    (tests inject their hooks this way). The meter starts at `started_at` (time.monotonic(); the CLI passes
    its process's start: start-up is billed on a rented machine), else when training begins.

    Under torchrun/accelerate every rank runs this; only the main process prints progress, writes the
    registry and runs the on-finish hook, and one callback shares stop decisions across ranks.
    """
    _check(cfg)
    preflight(cfg, force)
    from transformers import AutoTokenizer, set_seed

    from cheaptune.runs.guard import GuardCallback, attach
    from cheaptune.train import distributed, speedups
    from cheaptune.train.billing import bill_where_it_runs, running_on
    from cheaptune.train.callbacks import ProgressCallback, TimedSaveCallback
    from cheaptune.train.chat import prepare_chat
    from cheaptune.train.methods import build_model, resolve_precision
    from cheaptune.train.preemption import PreemptionCallback, PreemptionFlag
    from cheaptune.train.preference import build_preference_trainer
    from cheaptune.train.probe import ProbeCallback, fresh_peak
    from cheaptune.train.tracking import MetricsCallback
    from cheaptune.train.trainer import build_trainer, check_trained_tokens

    if cfg.objective == "grpo":
        from cheaptune.train.grpo import build_grpo_trainer as build
    elif cfg.objective == "kto":
        from cheaptune.train.kto import build_kto_trainer as build
    else:
        build = build_trainer if cfg.objective == "sft" else build_preference_trainer
    prec = resolve_precision(cfg)
    cfg, off = speedups.fit_planned(cfg, prec.device)
    cfg, billed = bill_where_it_runs(cfg, running_on(prec.device))
    for line in (off, billed):
        if line and os.environ.get("RANK", "0") == "0":  # said once, by the first process
            print(line, file=sys.stderr, flush=True)
    out_dir, root = Path(cfg.output_dir), cfg.checkpoint_root
    out_dir.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    resume_from = rs.choose(cfg.resume, root)
    if resume_from is not None:  # the settings an out-of-memory fallback found, so the resumed run fits
        cfg = cfg.model_copy(update=oom.load_settings(root))

    train_ds, eval_ds, fmt = load_data(cfg)
    set_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model)
    train_ds, eval_ds, fmt = prepare_chat(tokenizer, train_ds, eval_ds, fmt)
    model = build_model(cfg, prec)
    before = outputs.generate_samples(model, tokenizer, cfg.sample_prompts, cfg.sample_max_new_tokens) \
        if resume_from is None else []

    flag = PreemptionFlag()
    preempt = PreemptionCallback(flag)
    first: list[Any] = [preempt, *callbacks]
    if cfg.save_minutes:
        first.append(TimedSaveCallback(cfg.save_minutes))
    trainer = build(cfg, prec, model, tokenizer, train_ds, eval_ds, fmt, first)
    main = trainer.is_world_process_zero()
    empty = check_trained_tokens(trainer.train_dataset, cfg.sequence_len) if cfg.objective == "sft" else None
    if empty and main:  # refused (no row trains) before the run opens; many empty rows said once
        print(empty, file=sys.stderr, flush=True)
    if main:
        ck.clear_staging(root)  # what a killed save left; other ranks must not race the main one here
        if resume_from is not None:
            print(f"resuming from {resume_from}", flush=True)
    run = guardrails.open_run(cfg, resuming=resume_from is not None) if main else None
    if run is not None:  # said first: a run stopped at a cap or preempted never reaches the done line
        print(f"run {run.id}: `cheaptune report {run.id}` or `cheaptune ui` follows it", file=sys.stderr, flush=True)
    if run is not None and cfg._billed:
        run.event("billed_rate", cfg._billed)  # runs.billed.EVENT: the planned and billed rate, re-projected
    spend = root / ledger.FILE  # every rank reads it when resuming (they must agree on a refusal); main writes it
    if resume_from is None and main:
        spend.unlink(missing_ok=True)  # a fresh run: the spend of an earlier run in this folder is not its own
    guard = GuardCallback(guardrails.guard_settings(cfg, force=force, reproject_after_steps=max(cfg.probe_steps, 2),
                                                    checkpoint_s=guardrails.checkpoint_seconds(model),
                                                    spend_file=str(spend) if main or resume_from else None), run,
                          started_at=started_at)  # on a rented VM start-up is billed too
    if main:
        trainer.add_callback(ProbeCallback(cfg.probe_steps, cfg.predicted_peak_bytes or fresh_peak(cfg),
                                           cfg.predicted_tokens_per_s, run, lambda: guard.starvation.wait_fraction,
                                           planned_gpu=cfg.predicted_gpu))
        trainer.add_callback(ProgressCallback(out_dir / "train_log.jsonl"))
        trainer.add_callback(_CostLine(guard))
        trainer.add_callback(guardrails.RegistryCallback(run))
    trainer.add_callback(distributed.sync_stop_callback())  # last: sees every other callback's decision
    trainer.callback_handler.callbacks.insert(0, MetricsCallback(cfg.predicted_peak_bytes))  # before report_to
    attach(trainer, guard)
    finish = _Finisher(cfg, run)
    refusal = guard.start_refusal()  # a resumed run that cannot afford one more step does not start
    if refusal is not None:
        finish("budget-stopped", stop_reason="budget", steps=ck.step_of(resume_from) if resume_from else 0)
        raise BudgetStop(refusal)
    flag.install()
    poller = _spot_poller(cfg, flag)
    start = time.monotonic()
    tokens0 = _tokens_at(resume_from) if resume_from is not None else 0  # now: rotation may delete it while training

    def rebuild(new_cfg: TrainConfig, old: Any) -> Any:
        """The same model, data and callbacks under the settings an out-of-memory fallback chose."""
        new = build(new_cfg, prec, old.model, tokenizer, train_ds, eval_ds, fmt, [])
        new.callback_handler.callbacks = old.callback_handler.callbacks
        return new

    try:
        trainer, cfg = oom.train_with_fallbacks(trainer, cfg, resume_from, rebuild, run)
    except OutOfMemory as err:
        finish("failed", stop_reason="oom", steps=getattr(err, "step", None))
        raise
    except BaseException:
        finish("failed", steps=trainer.state.global_step)
        raise
    finally:
        flag.uninstall()
        if poller is not None:
            poller.stop()
    seconds = time.monotonic() - start

    if preempt.stopped_at is not None:
        took = trainer.last_save_seconds or 0.0
        if run is not None:
            run.event("preempted", {"reason": flag.reason, "step": preempt.stopped_at, "save_s": took})
        finish("preempted", hook=False, steps=trainer.state.global_step)
        raise Preempted(f"{flag.reason}: saved {trainer.last_checkpoint} in {took:.2f} s; "
                        "run the same command again to resume")
    if guard.stop_reason:
        finish("budget-stopped", stop_reason=guard.stop_reason, steps=trainer.state.global_step)
        raise BudgetStop(f"step {trainer.state.global_step}: {guard.stop_message}")

    final_eval = trainer.evaluate()["eval_loss"] if eval_ds is not None else None
    if trainer.is_fsdp_enabled:  # one full state dict for the adapter/model files, not per-rank shards
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(out_dir))
    after = outputs.generate_samples(trainer.model, tokenizer, cfg.sample_prompts, cfg.sample_max_new_tokens)
    extra: dict[str, Any] = {"resumed_from": str(resume_from) if resume_from else None,
                             "run_id": run.id if run is not None else None}
    if cfg.sample_prompts:
        extra["samples"] = {"before": before, "after": after}
    summary: dict[str, Any] = {}
    if main:
        tokenizer.save_pretrained(str(out_dir))
        if cfg.merge:
            extra["merged_dir"] = str(outputs.merge(cfg, out_dir, tokenizer))
        if cfg.eval_after:
            from cheaptune.evaluate.run import after_training

            extra["eval"] = after_training(out_dir, cfg.eval_data, eval_ds, run.id if run is not None else None)
        tokens_segment = int(trainer.state.num_input_tokens_seen or 0) - tokens0
        summary = outputs.write_summary(cfg, trainer.state, seconds=seconds, tokens_segment=tokens_segment,
                                        final_eval_loss=final_eval, precision=prec.name, extra=extra)
        finish("finished", steps=trainer.state.global_step, tokens=summary["tokens"],
               tokens_per_s=summary["tokens_per_s"], train_loss=summary["final_train_loss"],
               eval_loss=final_eval, elapsed_s=guard.total_elapsed_s)
    return TrainResult(out_dir, summary, resume_from)


class _CostLine(TrainerCallback):
    """The guard's money figures under each progress line ('$1.23 of $10.00, ~$4.56 at ETA')."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard
        self._step = -1

    def on_log(self, args, state, control, logs=None, **kwargs):
        text = self.guard.progress_text()
        if state.global_step == self._step and not ({"loss", "eval_loss"} & set(logs or {})):
            return  # under the progress line, which says a step once
        self._step = state.global_step
        if text:
            print(f"  cost {text}", file=sys.stderr, flush=True)


def _tokens_at(ckpt: Path) -> int:
    import json

    try:
        return int(json.loads((ckpt / "trainer_state.json").read_text()).get("num_input_tokens_seen") or 0)
    except (OSError, ValueError):
        return 0
