"""Predicted vs measured peak VRAM on the public rows of bench/data/vram_measured_public.csv.

Each row is estimated with its trainer's profile (estimate/data/profiles.yaml), as a user of that trainer
would run `cheaptune estimate --trainer NAME`. Accuracy is reported per trainer and overall, apart for the
rows a constant was fitted on (FITTED) and the rest; the headline is the rows not fitted. Two public sources
are an independent held-out check and never enter this bench (HELD_OUT).

Each row is compared on its own metric (allocated, reserved or nvidia-smi). Beside our estimator, two
popular formulas: weights-only (accelerate estimate-memory's "training with Adam": max stage, all
params trainable) and gpu_poor's fixed-overhead formula (docs/sources.md#accelerate-estimate-memory, #gpu_poor).
Run: .venv/bin/python bench/memory_accuracy.py   -> bench/results/memory_accuracy.json
"""

from __future__ import annotations

import csv
import datetime
import json
import statistics
import time
from pathlib import Path

from run_record import stamp

from cheaptune.estimate.memory import EstimateRequest, estimate_memory

HERE = Path(__file__).parent
UNITS = {"GB": 1e9, "GiB": 2**30, "MiB": 2**20, "MB": 1e6}
METRIC = {"max_allocated": "peak_allocated_bytes", "torch_peak": "peak_allocated_bytes",
          "peak_active": "peak_allocated_bytes", "max_reserved": "peak_reserved_bytes",
          "nvml": "device_total_bytes"}
# framework column -> (trainer profile, row-level settings the source states)
TRAINER = {
    # resource-tables.md header: "Bitsandbytes 0.41.1", before the 0.43.2 fix (estimate/profiles.py), and "PyTorch
    # 2.1.0", whose SDPA math path (falcon's one kv head, not repeated at 8641822) kept bf16 (simulate._math_sdpa_16bit)
    "litgpt": ("litgpt", {"bnb_keeps_input": True, "math_sdpa_16bit": True}),
    "torchtune": ("torchtune", {}),
    # the README's optimization ladder (torchtune@1814feb17 README.md "Optimization flags") adds chunked cross-entropy
    # only in its third row, so "+ Packed Dataset" and "+ Compile" ran torch.nn.CrossEntropyLoss on the whole logits,
    # which TransformerDecoder returned in fp32 without output chunks (torchtune/modules/transformer.py L647-652;
    # recipes/full_finetune_single_device.py L625-647 _loss_step); the model's own fp32 loss holds the same at the peak
    "torchtune-ce": ("torchtune", {"loss": "hf"}),
    # torchtune 0.1 (April 2024 tutorials): TransformerDecoder returned self.output(h).float() (torchtune@ff594c231
    # torchtune/modules/transformer.py L210) and the recipe ran torch.nn.CrossEntropyLoss on those full fp32 logits
    # (recipes/lora_finetune_single_device.py L447-453), the loss the chunked one replaced later
    # and torchao==0.1 (pyproject at 0914d5cfb), whose whole-weight NF4 init is replayed (estimate/torchao_init.py)
    # lora_dropout: the builders passed 0.05 to every LoRA layer (torchtune@0914d5cfb models/llama2/_model_builders.py
    # L101; @20747cd87 models/llama3/_model_builders.py L99)
    "torchtune-0.1": ("torchtune", {"loss": "hf", "torchao_nf4_unchunked": True, "lora_dropout": 0.05}),
    "hf-peft": ("hf", {"lora_dropout": 0.0}),  # method_comparison configs: lora_dropout 0.0
    # axolotl@dc71d8872 (Aug 2023): examples/llama-2/qlora.yml sets lora_dropout 0.05; requirements.txt bitsandbytes>=0.39.0
    # (0.41 then, before the 0.43.2 fix) and transformers from git main, whose LlamaModel called torch.utils.checkpoint
    # without use_reentrant (torch 2.0's reentrant default; the kwarg came in transformers 4.35)
    "axolotl-0.1": ("axolotl", {"lora_dropout": 0.05, "bnb_keeps_input": True, "reentrant_ckpt": True,
                                "kbit_prep": True}),  # peft's upcast kept: the cast back came in v0.3.0
    "axolotl-0.12": ("axolotl", {"lora_dropout": 0.05}),  # the row's configs/mistral-lora.yml sets lora_dropout 0.05
    "axolotl-0.19": ("axolotl", {}),  # bench/gpu_trainer_rows.py runs (lora_dropout 0.0, the profile's default)
    "hf-peft-config": ("hf", {}),  # the adapter is the result file's own peft_config (PEFT_CONFIGS)
    "hf-trainer": ("hf", {}),
    # PEFT's accelerate guides (docs/source/accelerate/fsdp.md, deepspeed.md; multi-GPU rows only) run examples/sft
    # with trl's SFTTrainer of early 2024, whose sharded-QLoRA path skipped peft's kbit preparation and whose peft
    # predates the fp32 adapter cast the hf profile models; until those versions are checked the rows keep the
    # profile their fitted constant (sharded_allocator_extra_fraction) was calibrated with
    "hf-peft+fsdp": ("cheaptune", {}),
    "hf-peft+deepspeed": ("cheaptune", {}),
    "llama-factory": ("llama-factory", {}),  # its defaults (estimate/data/profiles.yaml); no public row yet
}
# allocator_slack_fraction (estimate/data/overheads.yaml) was calibrated on the max_reserved PEFT rows
FITTED = {"P1", "P2", "P3", "P4", "P5", "P7", "P9"}
HELD_OUT = ("config_hub/finetune", "Performance-Comparison")
# row id -> the peft_config of its PEFT method_comparison result file, built with peft's get_peft_config
PEFT_CONFIGS = json.loads((HERE / "data" / "peft_method_comparison_configs.json").read_text())["rows"]
WHY = {
    "litgpt": "simulated with --trainer litgpt (bf16-true, LoRA dropout 0.05, chunked loss with the logits chunks held "
              "in fp32 as Fabric casts the outputs, bitsandbytes 0.41.1 keeping each 4-bit matmul's input, torch's fused "
              "tanh-GELU for phi, the fused qkv output, one LoRA dropout and zero_pad's source held as litgpt's fused "
              "attention keeps them, PyTorch 2.1's math SDPA in bf16 for falcon's single kv head); the rest of litgpt's "
              "model code is stood in by the HF class of the same shape "
              "(not simulated: lit_gpt@8641822's RMSNorm in bf16, where HF and later litgpt keep an fp32 copy)",
    "torchtune": "simulated with --trainer torchtune (bf16, chunked fp32 loss); torch.compile and torchao NF4 are not "
                 "simulated, so compiled rows read HIGH",
    "torchtune-ce": "torchtune README ladder rows before '+ Chunked Cross Entropy': --trainer torchtune with --loss hf "
                    "(torch.nn.CrossEntropyLoss on the fp32 logits of the whole batch); the '+ Compile' row reads HIGH",
    "torchtune-0.1": "torchtune's April 2024 tutorials: --trainer torchtune with --loss hf (full fp32 logits, as "
                     "torchtune 0.1 ran); QLoRA's peak reserved already held 9.13 GB at model init (qlora_finetune.rst): "
                     "the builder deep-copies one layer 32 times (each NF4 weight dequantized and quantized again through "
                     "torchao 0.1's [numel, 16] intermediates) and load_state_dict quantizes every weight once more; that "
                     "init replayed through a model of the caching allocator (estimate/torchao_init.py) reserves 9.13 GB, "
                     "held through training as load_time_peak; training's own growth above it is not simulated",
    "axolotl-0.1": "Axolotl's Aug 2023 Llama-2 QLoRA example: --trainer axolotl (model's loss over fp32 logits, peft's kbit "
                   "upcast of embeddings, head and norms to fp32, which axolotl then kept: the cast back came in v0.3.0), "
                   "bitsandbytes 0.41 keeping each 4-bit matmul's input, under reentrant checkpointing only for the block "
                   "being recomputed; nvidia-smi figure 'about 17 GB', rounded",
    "axolotl-0.12": "Axolotl 0.12 LoRA (Mistral-7B v0.3, 128 tokens): --trainer axolotl; max_memory_allocated since start",
    "hf-peft-config": "PEFT MetaMathQA, each method's adapter built from the result's own peft_config (peft "
                      "get_peft_config); measured as hf-peft below",
    "hf-peft": "PEFT MetaMathQA: --trainer hf (fp32 logits over Llama-3.2's 128k vocabulary; bf16 model with peft's "
               "fp32 adapters and no autocast, so each adapter keeps an fp32 copy of its input; prompt and prefix tuning "
               "with the result's own virtual tokens); accelerator_memory_max is max_memory_reserved over the whole run "
               "(utils.py L670, L730 @5d602fdbf), generation at batch 50 every 250 steps and the final test evaluation "
               "included (run.py L313-319, L371-378); in every result it is 1.5-2.6 GiB above the 99th percentile of the "
               "reserved memory logged after each training step, a part not simulated (eval, or the rarest longest batches)",
    "llama-factory": "simulated with --trainer llama-factory (model's loss over full fp32 logits, fp32 adapters under bf16 "
                     "autocast, fp32 master weights for full fine-tuning, no kbit upcast, LoRA dropout 0.0, all linear "
                     "targets, gradient checkpointing on); its reentrant checkpointing is simulated non-reentrant "
                     "(same simulated peak)",
}


def _targets(spec: str) -> str:
    names = {"qv": "qv", "o": "o_proj", "mlp": "mlp", "all-linear": "all-linear", "k": "k_proj", "v": "v_proj",
             "down": "down_proj"}
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


def main() -> None:
    from cheaptune.catalog.models import resolve_model

    rows, skipped = [], []
    for row in csv.DictReader((HERE / "data" / "vram_measured_public.csv").open()):
        if any(h in row["source"] for h in HELD_OUT):
            continue  # kept apart as the independent held-out check
        if row["num_gpus"] != "1" or not row["seq_len"].isdigit() or row["metric"] not in METRIC:
            skipped.append({"id": row["id"], "why": "multi-GPU, unknown length or metric"})
            continue
        try:
            spec = resolve_model(row["model"])
        except Exception as err:  # noqa: BLE001 - report and go on
            skipped.append({"id": row["id"], "why": f"model not resolvable offline: {err}"[:120]})
            continue
        method = row["method"]
        trainer, settings = TRAINER.get(row["framework"], ("cheaptune", {}))
        if row["id"] in PEFT_CONFIGS:  # any peft method: the estimate request names lora, the config decides
            own = PEFT_CONFIGS[row["id"]]
            settings = {**settings, "peft_config": json.dumps(own["peft_config"])}
            if "autocast_adapter_dtype" in own:  # the result's train_config turned peft's fp32 cast off
                settings["autocast_adapter_dtype"] = own["autocast_adapter_dtype"]
            method = "lora"
        req = EstimateRequest(
            model=row["model"], method=method, lora_r=int(row["lora_r"] or 16),
            lora_targets=_targets(row["lora_targets"]) if method in ("lora", "qlora", "dora") else "all-linear",
            micro_batch=int(row["micro_batch"]), seq_len=int(row["seq_len"]), precision=row["precision"],
            quant=row["quant"] or None, grad_ckpt=row["grad_ckpt"] == "yes",
            optimizer="adamw", attn="sdpa" if row["attn"] == "flash" else row["attn"],
            trainer=trainer, **settings,
        )
        t = time.time()
        est = estimate_memory(req)
        if est.basis != "simulated":
            skipped.append({"id": row["id"], "why": f"not simulated: {est.details.get('why_analytic', '')}"[:160]})
            continue
        measured = float(row["value"]) * UNITS[row["unit"]]
        pred = getattr(est, METRIC[row["metric"]])
        err = pred / measured - 1
        out = {"id": row["id"], "model": row["model"], "method": row["method"], "metric": row["metric"],
               "measured_gib": measured / 2**30, "predicted_gib": pred / 2**30, "error": err,
               "accelerate_error": accelerate_formula(spec.params, row["precision"]) / measured - 1,
               "gpu_poor_error": gpu_poor_formula(spec.config, row) / measured - 1,
               "framework": row["framework"], "trainer": trainer, "fitted": row["id"] in FITTED,
               "source": row["source"], "seconds": time.time() - t}
        rows.append(out)
        print(f"{out['id']:>4} {row['model'][:32]:32} {row['method']:13} {row['metric']:13} measured {out['measured_gib']:7.2f} "
              f"predicted {out['predicted_gib']:7.2f} GiB  ours {err:+6.1%}  accelerate {out['accelerate_error']:+6.1%}"
              f"  gpu_poor {out['gpu_poor_error']:+6.1%}", flush=True)

    def summary(key: str, subset: list[dict] | None = None) -> dict:
        errs = [r[key] for r in (rows if subset is None else subset)]
        if not errs:
            return {"rows": 0}
        return {"rows": len(errs), "median_abs_error": statistics.median(abs(e) for e in errs),
                "worst_under": min(errs), "worst_over": max(errs)}

    not_fitted = [r for r in rows if not r["fitted"]]
    per_trainer = {t: {"not_fitted": summary("error", [r for r in not_fitted if r["trainer"] == t]),
                       "fitted": summary("error", [r for r in rows if r["fitted"] and r["trainer"] == t])}
                   for t in sorted({r["trainer"] for r in rows})}
    result = {"date": datetime.date.today().isoformat(), "rows": rows, "skipped": skipped,
              "ours": summary("error", not_fitted), "ours_fitted_rows": summary("error", [r for r in rows if r["fitted"]]),
              "per_trainer": per_trainer, "accelerate": summary("accelerate_error", not_fitted),
              "gpu_poor": summary("gpu_poor_error", not_fitted), "why_implementations_differ": WHY}
    for name in ("ours", "ours_fitted_rows", "accelerate", "gpu_poor"):
        s = result[name]
        print(f"{name:16} rows {s['rows']:3}  median |error| {s['median_abs_error']:.1%}  "
              f"worst under-prediction {s['worst_under']:+.1%}")
    for t, parts in per_trainer.items():
        s = parts["not_fitted"]
        if s["rows"]:
            print(f"  {t:12} not fitted: rows {s['rows']:3}  median |error| {s['median_abs_error']:.1%}  "
                  f"worst under {s['worst_under']:+.1%}  worst over {s['worst_over']:+.1%}")
    for fw, why in WHY.items():
        print(f"{fw}: {why}")
    from cheaptune.util import atomic

    atomic.write_text(HERE / "results" / "memory_accuracy.json", json.dumps(stamp(result), indent=1))


if __name__ == "__main__":
    main()
