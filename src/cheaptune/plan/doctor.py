"""The guide's common mistakes as checks, each with one line of advice.

Checks read a `Facts` record, so the same checks serve a plan (facts from the recommended option) and a
training config (`cheaptune doctor CONFIG`, facts from its keys). A check returns a Finding or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

THIN_HEADROOM = 0.05  # under 5% free VRAM, allocator fragmentation alone can OOM
LONG_CHECKPOINT_MIN = 60.0
SHORT_JOB_SHARE = 0.30  # start-up + billing minimum above 30% of compute cost
EGRESS_SHARE = 0.10
STARVING_TOKENS_PER_S = 20_000  # above this a single-process dataloader struggles to keep up
MIN_WORKERS = 2


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    severity: str = "warn"  # error (the run will fail) | warn | info

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Facts:
    method: str | None = None
    gpu_name: str | None = None
    gpu_bf16: bool | None = None
    precision: str | None = None
    peak_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    spot: bool = False
    checkpoint_minutes: float | None = None
    budget_usd: float | None = None
    seq_len: int | None = None
    context_length: int | None = None
    tokens_per_s: float | None = None
    packing: bool | None = None
    dataloader_workers: int | None = None
    overhead_share: float | None = None  # (start-up + billing rounding) / compute cost
    per_second_billing: bool | None = None
    egress_merged_usd: float | None = None
    egress_adapter_usd: float | None = None
    total_usd: float | None = None
    peft_alternative: str | None = None  # "lora at $3.10" when a PEFT option beats a full fine-tune
    lora_same_gpu: str | None = None  # "$2.10" when LoRA fits on the QLoRA option's GPU for less
    spot_alternative: str | None = None  # "spot at $1.20" when on-demand was chosen and spot is cheaper
    missing: tuple[str, ...] = ()  # config keys a run needs and the config lacks (base_model, datasets)
    data_problems: tuple[str, ...] = ()  # why train would not read a dataset the config names (data.readers.iter_rows)
    rented: bool = False  # it trains on a machine billed by the hour (a price, or a cloud's spot notices)
    shuts_down: bool | None = None  # on_finish or a shutdown_command stops that machine (None: not known)


def missing_inputs(f: Facts) -> Finding | None:
    if f.missing:
        how = {"base_model": "base_model: (or --model)", "datasets": "datasets: [{path: ...}] (or --data)"}
        return Finding("missing_inputs", f"the config sets no {' and no '.join(f.missing)}, so train refuses it; "
                       f"set {' and '.join(how.get(k, k) for k in f.missing)}", "error")
    return None


def data_not_found(f: Facts) -> Finding | None:
    if f.data_problems:
        return Finding("data_not_found", f"{'; '.join(f.data_problems)} (train refuses this before loading the model; "
                       "fix the path, read from the config's folder, or pass --data)", "error")
    return None


def machine_left_running(f: Facts) -> Finding | None:
    if f.rented and f.shuts_down is False:
        return Finding("machine_left_running", "it trains on a rented machine (price_per_hour or spot_notice set) and "
                       "nothing stops that machine afterwards, so the bill runs on once training ends; set on_finish: "
                       "stop (or terminate) or a shutdown_command (cheaptune launch's autostop covers SkyPilot jobs only)")
    return None


def does_not_fit(f: Facts) -> Finding | None:
    if f.peak_bytes and f.gpu_memory_bytes and f.peak_bytes > f.gpu_memory_bytes:
        return Finding("does_not_fit", f"estimated peak {f.peak_bytes / 1024**3:.1f} GiB per GPU is more than "
                       f"{f.gpu_name or 'the GPU'}'s {f.gpu_memory_bytes / 1024**3:.1f} GiB: it will run out of memory; "
                       "lower micro_batch_size, enable gradient_checkpointing, use LoRA/QLoRA, or a bigger GPU "
                       "(`cheaptune plan` finds one)", "error")
    return None


def thin_headroom(f: Facts) -> Finding | None:
    if f.peak_bytes and f.gpu_memory_bytes and f.peak_bytes <= f.gpu_memory_bytes:
        free = 1 - f.peak_bytes / f.gpu_memory_bytes
        if free < THIN_HEADROOM:
            return Finding("thin_headroom", f"only {free:.0%} of {f.gpu_name or 'the GPU'}'s memory is left free; "
                           "lower the micro-batch or enable gradient checkpointing to avoid an OOM mid-run")
    return None


def full_where_peft_fits(f: Facts) -> Finding | None:
    if f.method == "full" and f.peft_alternative:
        return Finding("full_where_peft_fits", f"full fine-tuning where {f.peft_alternative} also fits for less; "
                       "use --method lora unless you need every weight to move")
    return None


def qlora_where_lora_fits(f: Facts) -> Finding | None:
    if f.method == "qlora" and f.lora_same_gpu:
        return Finding("qlora_where_lora_fits", f"LoRA fits on the same {f.gpu_name} ({f.lora_same_gpu}); QLoRA "
                       "dequantises every step and runs 1.5-2x slower, so it costs more there")
    return None


def on_demand_where_spot_ok(f: Facts) -> Finding | None:
    if not f.spot and f.spot_alternative:
        return Finding("on_demand_where_spot_ok", f"on-demand chosen but {f.spot_alternative}; training resumes "
                       "from checkpoints, so allow spot (--spot auto)")
    return None


def spot_without_checkpoints(f: Facts) -> Finding | None:
    if f.spot and (f.checkpoint_minutes is None or f.checkpoint_minutes > LONG_CHECKPOINT_MIN):
        return Finding("spot_without_checkpoints", "spot instance without frequent checkpoints: a preemption loses "
                       "everything since the last save; set save_minutes (the plan's Young/Daly interval)")
    return None


def no_budget(f: Facts) -> Finding | None:
    if f.budget_usd is None:
        return Finding("no_budget", "no budget set; pass --budget USD (budget_usd:) so training stops at the cap "
                       "instead of running up the bill", "info")
    return None


def no_bf16(f: Facts) -> Finding | None:
    if f.gpu_bf16 is False and f.precision and f.precision.startswith("bf16"):  # train.methods.resolve_precision
        from cheaptune.estimate.policy import NO_BF16_PRECISION

        return Finding("no_bf16", f"precision {f.precision} needs bf16, which {f.gpu_name} lacks, so train refuses it "
                       f"there; use precision: {NO_BF16_PRECISION}", "error")
    if f.gpu_bf16 is False:
        done = bool(f.precision) and f.precision.startswith(("fp16", "fp32"))
        return Finding("no_bf16", f"{f.gpu_name} has no bf16; " + ("training runs in fp16 with loss scaling (fp16: true)"
                       if done else "train in fp16 with loss scaling (fp16: true, bf16: false)"), "info" if done else "warn")
    return None


def seq_beyond_context(f: Facts) -> Finding | None:
    if f.seq_len and f.context_length and f.seq_len > f.context_length:
        return Finding("seq_beyond_context", f"sequence length {f.seq_len} exceeds the model's context "
                       f"{f.context_length}; use --seq-len {f.context_length} or a long-context model")
    return None


def short_job(f: Facts) -> Finding | None:
    if f.overhead_share is not None and f.overhead_share > SHORT_JOB_SHARE:
        fix = "batch more work per launch" if f.per_second_billing else "prefer a per-second-billed provider"
        return Finding("short_job", f"start-up and billing minimums are {f.overhead_share:.0%} of the compute cost; {fix}")
    return None


def merged_egress(f: Facts) -> Finding | None:
    merged = f.egress_merged_usd or 0.0
    if f.total_usd and merged > EGRESS_SHARE * f.total_usd and merged > 0.01:
        if f.method == "full":
            return Finding("merged_egress", f"downloading the fine-tuned model costs ${merged:.2f} in egress; "
                           "LoRA would ship a small adapter instead, or serve it where it was trained")
        return Finding("merged_egress", f"a merged-model download would cost ${merged:.2f} in egress (the adapter: "
                       f"${f.egress_adapter_usd or 0:.2f}); ship the adapter and merge where the model is served", "info")
    return None


def data_starvation(f: Facts) -> Finding | None:
    if f.packing is False:
        return Finding("data_starvation", "sample packing is off: padding wastes GPU time (up to 3x in "
                       "torchtune's measurements); set sample_packing: true")
    if f.tokens_per_s and f.tokens_per_s > STARVING_TOKENS_PER_S and (f.dataloader_workers or 0) < MIN_WORKERS:
        return Finding("data_starvation", f"{f.tokens_per_s:,.0f} tokens/s with fewer than {MIN_WORKERS} dataloader "
                       "workers may starve the GPU; pre-tokenize and set dataloader_num_workers: 4", "info")
    return None


CHECKS: tuple[Callable[[Facts], Finding | None], ...] = (
    missing_inputs, data_not_found, does_not_fit, thin_headroom, full_where_peft_fits, qlora_where_lora_fits, on_demand_where_spot_ok, spot_without_checkpoints,
    no_budget, no_bf16, seq_beyond_context, short_job, merged_egress, data_starvation, machine_left_running,
)


def run_checks(facts: Facts) -> list[Finding]:
    return [f for check in CHECKS if (f := check(facts)) is not None]
