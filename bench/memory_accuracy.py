"""Predicted vs measured peak VRAM on the public rows of bench/data/vram_measured_public.csv.

Each row is estimated through the CLI's own path (cli.estimate.request_from_options) with the flags a user of that
trainer would pass: `--trainer NAME[==VERSION]`, `--versions lib==X,...` from the versions the source states, and the
row's settings; the bench adds no request field of its own. Each row is compared on its own metric (allocated,
reserved or nvidia-smi).

Scoring is leave-one-source-out: the one fitted constant (allocator_slack_fraction, estimate/data/overheads.yaml,
fitted on the max_reserved and nvml rows, one median per source) is refitted without each source, then that source's rows are estimated with it; a
benchmark's many rows count as one source. The headline is that LOSO error, per trainer, per method (QLoRA apart)
and per board, beside the median of per-source medians. Rows of versions whose mechanism was removed (NOT_MODELLED)
are reported apart, as what they are. Beside our estimator, two popular formulas: weights-only (accelerate
estimate-memory's "training with Adam") and gpu_poor's fixed-overhead formula (docs/sources.md).
Run: .venv/bin/python bench/memory_accuracy.py   -> bench/results/memory_accuracy.json
"""

from __future__ import annotations

import csv
import datetime
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from run_record import stamp

from cheaptune.cli.estimate import request_from_options
from cheaptune.estimate.memory import overheads
from cheaptune.estimate.memory.memory import estimate_memory

HERE = Path(__file__).parent
UNITS = {"GB": 1e9, "GiB": 2**30, "MiB": 2**20, "MB": 1e6}
METRIC = {"max_allocated": "peak_allocated_bytes", "torch_peak": "peak_allocated_bytes",
          "peak_active": "peak_allocated_bytes", "max_reserved": "peak_reserved_bytes",
          "nvml": "device_total_bytes"}
# framework column -> (--trainer, other CLI options the source states beyond the row's columns)
TRAINER = {
    # resource-tables.md header: "Bitsandbytes 0.41.1" and "PyTorch 2.1.0"; lit-gpt@8641822 setup.py L12 version="0.1.0"
    "litgpt": ("litgpt==0.1.0", {"versions": "bitsandbytes==0.41.1,torch==2.1.0"}),
    "litgpt-0.4": ("litgpt", {}),  # the row's versions column names the release (config_hub rows)
    "torchtune": ("torchtune", {}),
    # the README's optimization ladder (torchtune@1814feb17 README.md "Optimization flags") adds chunked cross-entropy
    # only in its third row, so "+ Packed Dataset" and "+ Compile" ran torch.nn.CrossEntropyLoss on the whole logits
    "torchtune-ce": ("torchtune", {"loss": "hf"}),
    # torchtune 0.1 (April 2024 tutorials): full fp32 logits (torchtune@ff594c231 modules/transformer.py L210) and
    # lora_dropout 0.05 in the builders (@0914d5cfb models/llama2/_model_builders.py L101)
    "torchtune-0.1": ("torchtune==0.1.0", {"loss": "hf", "lora_dropout": 0.05}),
    "hf-peft": ("hf", {"lora_dropout": 0.0}),  # method_comparison configs: lora_dropout 0.0
    # axolotl@dc71d8872 (Aug 2023): examples/llama-2/qlora.yml sets lora_dropout 0.05; its release's pins in profiles.yaml
    "axolotl-0.1": ("axolotl==0.1.0", {"lora_dropout": 0.05}),
    "axolotl-0.12": ("axolotl==0.12.0", {"lora_dropout": 0.05}),  # the row's configs/mistral-lora.yml
    "axolotl-0.19": ("axolotl==0.19.0", {}),  # bench/gpu_trainer_rows.py runs (lora_dropout 0.0, the profile's default)
    "hf-peft-config": ("hf", {}),  # the adapter is the result file's own peft_config (--peft-config)
    "hf-trainer": ("hf", {}),
    # PEFT's accelerate guides (multi-GPU rows only): keep the profile their fitted sharding constant was fitted with
    "hf-peft+fsdp": ("cheaptune", {}),
    "hf-peft+deepspeed": ("cheaptune", {}),
    "llama-factory": ("llama-factory", {}),  # its defaults (estimate/data/profiles.yaml); no public row yet
    "unsloth": ("unsloth", {}),  # the row's versions column names the release and its libraries
    # fms-hf-tuning runs the HF Trainer (trl SFTTrainer) on the model's own loss; versions from the row's column
    "fms-hf-tuning": ("hf", {}),
}
# rows whose only modelled cause was a mechanism for one version, removed from the estimator (issue 31)
NOT_MODELLED = {
    "TT5": "torchtune 0.1 + torchao 0.1 QLoRA: its model init reserved 9.13 GB (qlora_finetune.rst), torchao 0.1's "
           "whole-weight NF4 init through the caching allocator; that replay served this one row and was removed",
    "P54": "OSF under peft < 0.21 (each adapted weight rebuilt per forward from its SVD factors); peft 0.21 "
           "replaced it and the old path served this one row, so it was removed",
}
# source text -> one source (a benchmark's rows are one source); first match wins
SOURCES = (("method_comparison/MetaMathQA", "PEFT MetaMathQA results"),
           ("config_hub/finetune", "litgpt config_hub/finetune README"),
           ("resource-tables", "litgpt resource-tables.md"), ("finetune_lora.md", "litgpt finetune_lora.md"),
           ("prepare_dataset.md", "litgpt prepare_dataset.md"), ("torchtune README", "torchtune README"),
           ("torchtune@1814feb17:README", "torchtune README"),
           ("torchtune docs/source/tutorials", "torchtune tutorials (Apr 2024)"),
           ("fms-acceleration", "fms-acceleration benchmark refs"),
           ("axolotl-ai-cloud/axolotl examples", "axolotl examples/llama-2 README"),
           ("finetuning-axoloti", "andrewvergel/finetuning-axoloti log"),
           ("unslothai/notebooks", "unsloth notebooks"), ("model_memory_anatomy", "transformers docs"))
# row id -> the peft_config of its PEFT method_comparison result file, built with peft's get_peft_config
PEFT_CONFIGS = json.loads((HERE / "data" / "peft_method_comparison_configs.json").read_text())["rows"]
# a dataset's longest sample, for rows that cap the length and pad each batch to its longest sample: the longest
# batch a run meets is at most this, so --seq-len is min(cap, longest) where the row names the dataset
LONGEST_SAMPLE = {
    # the cleaned Alpaca (gururise/AlpacaDataCleaned; litgpt's copy: 51,759 samples, Unsloth's yahma/alpaca-cleaned
    # 51,760): 1,304 Llama-2 tokens, litgpt resource-tables.md@0cc02afa 'seq = longest Alpaca sample' (rows R11-R17)
    "alpaca-cleaned": 1304,
}
OPTIMIZER = {"paged-adamw-32bit": "adamw"}  # bnb's paged 32-bit AdamW: AdamW's state, paged (outside the allocator)
# xformers' memory-efficient kernel saves what SDPA's fused kernels save (the estimator's sdpa, and Unsloth's non-flash
# path: estimate/memory/unsloth_kernels.py); flash rows pass --attn flash
ATTN = {"xformers": "sdpa"}
ROPE_SCALED = re.compile(r"RoPE[- ]scal", re.IGNORECASE)
# Unsloth's get_peft_model trains these target names whole, as modules_to_save (--train-modules), not as LoRA:
# unslothai/unsloth@015bdef0d94a241bcd94eec7a405b1700632180d models/llama.py L3317-3367
UNSLOTH_WHOLE = ("embed", "lm_head")
def _targets(spec: str) -> str:
    names = {"qv": "qv", "o": "o_proj", "mlp": "mlp", "all-linear": "all-linear", "k": "k_proj", "v": "v_proj",
             "down": "down_proj", "embed": "embed_tokens"}
    return ",".join(names.get(p, p) for p in spec.split("+")) if spec else "all-linear"


def accelerate_formula(params: float, precision: str) -> float:
    return params * (16 if precision == "fp32" else 8)


def gpu_poor_formula(cfg: dict, row: dict) -> float:
    h, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    i, a = cfg.get("intermediate_size", 4 * h), cfg["num_attention_heads"]
    s, b = int(row["seq_len"]), int(row["micro_batch"])
    params = 2 * V * h + 4 * h * h * L + 3 * i * h * L
    weights = params * (0.5 if row["method"] == "qlora" else 2)
    attn = s * h * 8 * 2 + s * s * a * 8
    act = (attn + 2 * h * s * 2 + 6 * i * s * 2 + 8 * s + 6 * s * h * 2) * L * b
    act *= 0.15 if row["grad_ckpt"] == "yes" else 1
    train = 3 * params * 2 if row["method"] == "full" else L * 8 * h * 2 * 4 * 3 * 2
    return weights + act + train + 650e6


def source_of(row: dict, previous: str) -> str:
    """The one source a row belongs to ('same' rows continue the row above)."""
    text = previous if row["source"].startswith("same") else row["source"]
    return next((name for key, name in SOURCES if key in text), text.split(" (")[0][:80])


def stated_versions(text: str) -> tuple[str | None, str | None]:
    """(trainer version, 'lib==X,...') from a versions column such as 'litgpt 0.4.5; bitsandbytes==0.42.0
    (pyproject); torch>=2.2.0' or 'unsloth 2024.8; transformers 4.44.2; torch 2.4.0+cu121': exact versions only
    (a range is what the release's own pins say already)."""
    from cheaptune.estimate.memory.versions import known_libraries

    found = dict(re.findall(r"([A-Za-z_-]+)(?:==| )(\d[\w.+]*)", text or ""))
    found = {k.lower(): v for k, v in found.items()}
    own = found.pop("litgpt", None) or found.pop("unsloth", None)
    pins = ",".join(f"{k}=={v}" for k, v in sorted(found.items()) if k in known_libraries())
    return own, pins or None


def stated_accumulation(row: dict) -> int:
    """Micro-steps per optimizer step as the row's note states them: 'gradient accumulation N' (Unsloth's
    notebooks), 'gradient_accumulation_steps N' (HF TrainingArguments), or litgpt's 'global batch G' (its
    gradient_accumulation_iters = global_batch_size // micro_batch_size on one device); else 1."""
    note = row.get("note", "")
    found = re.search(r"gradient[ _]accumulation(?:_steps)? (\d+)", note)
    if found:
        return int(found[1])
    found = re.search(r"global batch (\d+)", note)
    return max(1, int(found[1]) // int(row["micro_batch"])) if found else 1


def seq_len_seen(row: dict) -> int:
    """The tokens of the longest batch the row's run can meet: its cap, or its dataset's longest sample below it."""
    cap = int(row["seq_len"])
    if row.get("seq_len_kind") != "cap":
        return cap
    longest = [n for name, n in LONGEST_SAMPLE.items() if f"/{name} truncated" in row.get("note", "")]
    return min([cap, *longest])


def cli_options(row: dict, tmp: Path) -> dict:
    """The `cheaptune estimate` options a user of the row's trainer passes for it; --allow-long-context where the row
    states that its run scaled RoPE past the model's context (US26: Unsloth's RoPE scaling of TinyLlama to 4096), as
    that user would pass it. A row longer than a context of learned positions (GPT-BigCode's n_positions) cannot
    describe a run and stays refused."""
    trainer, extra = TRAINER.get(row["framework"], ("cheaptune", {}))
    own, pins = stated_versions(row.get("versions", ""))
    extra = dict(extra)
    if own:
        trainer = f"{trainer.split('==')[0]}=={own}"
    if pins:
        extra["versions"] = ",".join(filter(None, (extra.get("versions"), pins)))
    method = row["method"]
    if row["id"] in PEFT_CONFIGS:  # any peft method: --peft-config with --method lora, the config decides
        own_cfg = PEFT_CONFIGS[row["id"]]
        path = tmp / f"{row['id']}.json"
        path.write_text(json.dumps(own_cfg["peft_config"]))
        extra["peft_config"] = str(path)
        if "autocast_adapter_dtype" in own_cfg:  # the result's train_config turned peft's fp32 cast off
            extra["peft_autocast"] = own_cfg["autocast_adapter_dtype"]
        method = "lora"
    targets = row["lora_targets"]
    if row["framework"] == "unsloth" and targets:  # get_peft_model moves embed_tokens and lm_head to modules_to_save
        parts = targets.split("+")
        whole = [_targets(p) for p in parts if p in UNSLOTH_WHOLE]
        targets = "+".join(p for p in parts if p not in UNSLOTH_WHOLE)
        if whole:
            extra["train_modules"] = ",".join(whole)
    return dict(model=row["model"], method=method, lora_r=int(row["lora_r"] or 16),
                lora_targets=_targets(targets) if method in ("lora", "qlora", "dora") else None,
                micro_batch=int(row["micro_batch"]), seq_len=seq_len_seen(row), precision=row["precision"] or None,
                quant=row["quant"] or None, grad_ckpt=row["grad_ckpt"] == "yes",
                optimizer=OPTIMIZER.get(row["optimizer"], row["optimizer"] or "adamw"),
                attn=ATTN.get(row["attn"], row["attn"] or "sdpa"), trainer=trainer,
                grad_accum=stated_accumulation(row), allow_long_context=ROPE_SCALED.search(row.get("note", "")) is not None,
                **extra)


def _summary(errs: list[float]) -> dict:
    if not errs:
        return {"rows": 0}
    return {"rows": len(errs), "median_abs_error": statistics.median(abs(e) for e in errs),
            "worst_under": min(errs), "worst_over": max(errs)}


def fit_slack(rows: list[dict]) -> float | None:
    """allocator_slack_fraction as it is fitted: measured reserved / simulated allocated - 1 on the rows that
    measure the caching allocator's pool, max_reserved and nvml (nvidia-smi's total is that pool plus the CUDA
    context, overheads.yaml cuda_context_bytes, taken off first); the median per source, then the median of those,
    so a benchmark's many rows count once (never below 0); None with no such row."""
    context = overheads.constants()["cuda_context_bytes"]
    per_source: dict[str, list[float]] = {}
    for r in rows:
        if r["metric"] in ("max_reserved", "nvml"):
            pool = r["measured_bytes"] - (context if r["metric"] == "nvml" else 0)
            per_source.setdefault(r["group"], []).append(pool / r["allocated_bytes"] - 1)
    medians = [statistics.median(v) for v in per_source.values()]
    return max(statistics.median(medians), 0.0) if medians else None


def loso(rows: list[dict]) -> None:
    """Each row's leave-one-source-out prediction and error: the slack refitted without its source (with no
    reserved row elsewhere, the unfitted floor allocator_slack_min_bytes alone)."""
    for source in {r["group"] for r in rows}:
        fraction = fit_slack([r for r in rows if r["group"] != source])
        for r in rows:
            if r["group"] != source:
                continue
            reserved, total = overheads.reserved_and_total(r["allocated_bytes"], fraction or 0.0)
            pred = {"peak_allocated_bytes": r["allocated_bytes"], "peak_reserved_bytes": reserved,
                    "device_total_bytes": total}[METRIC[r["metric"]]]
            r["loso_slack_fraction"] = fraction
            r["loso_predicted_gib"] = pred / 2**30
            r["loso_error"] = pred / r["measured_bytes"] - 1


def fit_qlora_range(rows: list[dict]) -> float:
    """qlora_range_fraction as it is fitted: the 90th percentile of the QLoRA rows' under-prediction (0 where over)."""
    under = sorted(max(0.0, -r["loso_error"]) for r in rows if r["method"] == "qlora")
    return under[min(len(under) - 1, int(0.9 * len(under)))] if under else 0.0


def qlora_coverage(rows: list[dict]) -> dict:
    """How often the QLoRA range's upper end (the fraction refitted without the row's source) holds the measurement."""
    for source in {r["group"] for r in rows if r["method"] == "qlora"}:
        f = fit_qlora_range([r for r in rows if r["group"] != source])
        for r in rows:
            if r["group"] == source and r["method"] == "qlora":
                slack = 1 + (r["loso_slack_fraction"] or 0.0) if r["metric"] != "max_allocated" else 1
                upper = r["loso_predicted_gib"] * 2**30 + r["allocated_bytes"] * f * slack
                r["loso_range_fraction"], r["loso_upper_error"] = f, upper / r["measured_bytes"] - 1
    q = [r for r in rows if "loso_upper_error" in r]
    return {"rows": len(q), "covered": sum(r["loso_upper_error"] >= 0 for r in q),
            "worst_under_of_upper_end": min((r["loso_upper_error"] for r in q), default=0.0),
            "median_upper_end_error": statistics.median(r["loso_upper_error"] for r in q) if q else 0.0,
            "fraction_on_all_rows": fit_qlora_range(rows)}


def method_class(method: str) -> str:
    return method if method in ("full", "lora", "qlora") else "other PEFT"


def scoring(rows: list[dict]) -> dict:
    """LOSO figures overall, per trainer, per method class, per board and per source."""
    def by(key) -> dict:
        return {k: _summary([r["loso_error"] for r in rows if key(r) == k]) for k in sorted({key(r) for r in rows})}

    per_source = by(lambda r: r["group"])
    return {"rows": len(rows), "sources": len(per_source), **_summary([r["loso_error"] for r in rows]),
            "median_of_source_medians": statistics.median(s["median_abs_error"] for s in per_source.values()),
            "qlora": _summary([r["loso_error"] for r in rows if r["method"] == "qlora"]),
            "under_10pct_rows": [r["id"] for r in rows if r["loso_error"] < -0.10],
            "per_trainer": by(lambda r: r["trainer"]), "per_method": by(lambda r: method_class(r["method"])),
            "per_board": by(lambda r: r["gpu"]), "per_source": per_source}


# what a fake-tensor step cannot run: ops whose output depends on tensor values (an adapter's data-driven init, a
# mask's nonzero, a router's bincount), and adapters sized by the full depth where 2-3 blocks are simulated
DATA_DEPENDENT = ("Cannot copy out of meta tensor", "_local_scalar_dense", "item() cannot be called", "nonzero",
                  "bincount", "DynamicOutputShape", "DataDependentOutput")


def not_simulated(why: str) -> str:
    """The skip reason of a row the estimator gave to its formula instead of the simulation."""
    if any(k in why for k in DATA_DEPENDENT):
        return ("not simulated: the adapter reads tensor values (its init or forward calls a data-dependent op), "
                f"which a step on fake tensors cannot run; the estimate is the analytic formula ({why[:70]})")
    if "more adapter layers" in why:
        return ("not simulated: the adapter names more layers than the 2-3 block stacks the estimate extrapolates "
                f"from; --full-sim simulates every block ({why[:70]})")
    return f"not simulated: {why}"[:200]


# what a step holds at its peak whatever the activations do: weights, gradients, optimizer state
STORED = ("weights", "trainable_weights", "gradients", "optimizer_state")


def unreadable(measured: float, breakdown: dict[str, int]) -> str:
    """Why a row's label cannot describe its run ('' when it can): its measured peak is below the stored state its
    labelled settings hold (weights, gradients, optimizer state), which no activation or allocator term lowers."""
    held = sum(breakdown.get(k, 0) for k in STORED)
    if measured >= held:
        return ""
    return (f"unreadable: measured {measured / 2**30:.2f} GiB is below the {held / 2**30:.2f} GiB of weights, gradients "
            "and optimizer state its labelled settings hold on one device, so the label cannot describe the run measured")


def estimate_row(row: dict, tmp: Path) -> tuple[dict | None, str]:
    from cheaptune.catalog.models import resolve_model

    try:
        spec = resolve_model(row["model"])
        req, _ = request_from_options(**cli_options(row, tmp))
        t = time.time()
        est = estimate_memory(req)
    except Exception as err:  # noqa: BLE001 - a bench reports every row, failures included
        return None, f"{type(err).__name__}: {err}"[:160]
    if est.basis != "simulated":
        return None, not_simulated(est.details.get("why_analytic", ""))
    measured = float(row["value"]) * UNITS[row["unit"]]
    if why := unreadable(measured, est.breakdown):
        return None, why
    rng = est.details.get("range", {}).get(METRIC[row["metric"]])
    pred = rng[0] if rng else getattr(est, METRIC[row["metric"]])  # QLoRA: scored on its simulated (lower) end
    return {"id": row["id"], "model": row["model"], "method": row["method"], "metric": row["metric"],
            "gpu": row["gpu"], "framework": row["framework"], "trainer": req.trainer, "versions": req.versions,
            "versions_not_known": est.details.get("versions", {}).get("not_known", []),
            "measured_gib": measured / 2**30, "measured_bytes": measured, "allocated_bytes": est.peak_allocated_bytes,
            "predicted_gib": pred / 2**30, "error": pred / measured - 1,
            "accelerate_error": accelerate_formula(spec.params, row["precision"]) / measured - 1,
            "gpu_poor_error": gpu_poor_formula(spec.config, row) / measured - 1,
            "source": row["source"], "seconds": time.time() - t}, ""


def main() -> None:
    rows, skipped, unread, apart, previous = [], [], [], [], ""
    with tempfile.TemporaryDirectory() as tmp:
        for row in csv.DictReader((HERE / "data" / "vram_measured_public.csv").open()):
            group = source_of(row, previous)
            previous = previous if row["source"].startswith("same") else row["source"]
            if row["num_gpus"] != "1" or not row["seq_len"].isdigit() or row["metric"] not in METRIC:
                skipped.append({"id": row["id"], "why": "multi-GPU, unknown length or metric"})
                continue
            out, why = estimate_row(row, Path(tmp))
            if out is None:
                (unread if why.startswith("unreadable") else skipped).append({"id": row["id"], "why": why})
                continue
            out["group"] = group
            (apart if row["id"] in NOT_MODELLED else rows).append(out)
            print(f"{out['id']:>4} {row['model'][:30]:30} {row['method']:13} {row['metric']:13} measured "
                  f"{out['measured_gib']:7.2f} predicted {out['predicted_gib']:7.2f} GiB  ours {out['error']:+6.1%}  "
                  f"accelerate {out['accelerate_error']:+6.1%}  gpu_poor {out['gpu_poor_error']:+6.1%}", flush=True)
    loso(rows)
    coverage = qlora_coverage(rows)
    for r in apart:
        r["why_apart"] = NOT_MODELLED[r["id"]]
    fitted = fit_slack(rows)
    result = {"date": datetime.date.today().isoformat(), "loso": scoring(rows), "rows": rows, "skipped": skipped,
              "unreadable": unread,
              "not_modelled": apart, "slack_fraction_on_all_rows": fitted, "qlora_range": coverage,
              "accelerate": _summary([r["accelerate_error"] for r in rows]),
              "gpu_poor": _summary([r["gpu_poor_error"] for r in rows])}
    s = result["loso"]
    print(f"leave-one-source-out over {s['sources']} sources, {s['rows']} rows: median |error| "
          f"{s['median_abs_error']:.1%}, worst under {s['worst_under']:+.1%}, rows under -10%: "
          f"{len(s['under_10pct_rows'])}; QLoRA {s['qlora'].get('median_abs_error', 0):.1%} over {s['qlora']['rows']} rows;"
          f" median of per-source medians {s['median_of_source_medians']:.1%}")
    print(f"QLoRA range upper end (fraction refitted without each source): holds {coverage['covered']} of "
          f"{coverage['rows']} rows, worst under {coverage['worst_under_of_upper_end']:+.1%}, median "
          f"{coverage['median_upper_end_error']:+.1%}; fraction on all rows {coverage['fraction_on_all_rows']:.3f}")
    for part in ("per_trainer", "per_method", "per_board", "per_source"):
        for k, v in s[part].items():
            print(f"  {part[4:]:7} {k[:40]:40} rows {v['rows']:3}  median |error| {v['median_abs_error']:.1%}  "
                  f"worst under {v['worst_under']:+.1%}  worst over {v['worst_over']:+.1%}")
    for r in apart:
        print(f"  apart {r['id']}: {r['error']:+.1%} ({r['why_apart']})")
    for r in unread:
        print(f"  unreadable {r['id']}: {r['why'].removeprefix('unreadable: ')}")
    from cheaptune.util import atomic

    atomic.write_text(HERE / "results" / "memory_accuracy.json", json.dumps(stamp(result), indent=1))


if __name__ == "__main__":
    main()
