"""Configs, memory-log parsing and public-CSV rows for bench/gpu_trainer_rows.py (sources in its docstring).

Kept apart from the runner so the tests exercise them without a GPU or either trainer installed.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# metric as the trainer logs it -> (metric column of bench/data/vram_measured_public.csv, torch counter, window)
METRICS = {
    "axolotl": {
        "memory/max_allocated (GiB)": ("max_allocated", "torch.cuda.max_memory_allocated()", "since previous log"),
        "memory/device_reserved (GiB)": ("max_reserved", "torch.cuda.max_memory_reserved()", "since previous log"),
        "memory/max_active (GiB)": ("peak_active", 'torch.cuda.memory_stats()["active_bytes.all.peak"]',
                                    "since previous log"),
    },
    "llama-factory": {
        "vram_allocated": ("max_allocated", "torch.cuda.max_memory_allocated()", "since process start"),
        "vram_reserved": ("max_reserved", "torch.cuda.max_memory_reserved()", "since process start"),
    },
}
PACKAGE = {"axolotl": "axolotl", "llama-factory": "llamafactory"}
FRAMEWORK = {"axolotl": "axolotl-0.19", "llama-factory": "llama-factory"}  # bench/memory_accuracy.py TRAINER keys
ID_PREFIX = {"axolotl": "AXG", "llama-factory": "LFG"}
# precision column: LoRA/QLoRA adapters fp32 under bf16 autocast in both; full: axolotl keeps bf16 weights and
# AdamW state, LLaMA-Factory 0.9.5 casts trainable params to fp32 (model/adapter.py L52 full, L313-325 LoRA; no pure_bf16)
PRECISION = {("axolotl", "full"): "bf16-true", ("llama-factory", "full"): "bf16-mixed"}
PUBLIC_CSV = Path(__file__).resolve().parent / "data" / "vram_measured_public.csv"
COLUMNS = PUBLIC_CSV.read_text().split("\n", 1)[0].split(",")  # the public CSV's own header
LORA = {"r": 16, "alpha": 32, "dropout": 0.0}


class BadResult(ValueError):
    """A result file that --to-csv cannot read."""


def axolotl_config(case: Any, model: Path, data: Path, out: Path, steps: int, cuda: bool) -> dict[str, Any]:
    adapter = {} if case.method == "full" else {
        "adapter": case.method, "load_in_4bit": case.method == "qlora", "lora_r": LORA["r"],
        "lora_alpha": LORA["alpha"], "lora_dropout": LORA["dropout"], "lora_target_linear": True,
        # left unset, axolotl switches its Triton LoRA kernels on; they need CUDA, so the CPU smoke sets them off
        **({} if case.lora_kernels and cuda else {f"lora_{k}_kernel": False for k in ("mlp", "qkv", "o", "embedding")})}
    return {
        "base_model": str(model), "datasets": [{"path": str(data), "type": "alpaca", "ds_type": "json"}],
        "dataset_prepared_path": str(out / "prepared"), "val_set_size": 0, "output_dir": str(out),
        "sequence_len": case.seq_len, "excess_length_strategy": "truncate", "sample_packing": False, **adapter,
        "micro_batch_size": case.micro_batch, "gradient_accumulation_steps": 1, "max_steps": steps,
        "num_epochs": 1, "optimizer": "adamw_torch_fused" if cuda else "adamw_torch", "learning_rate": 2.0e-4,
        "lr_scheduler": "cosine", "bf16": cuda, "tf32": False, "attn_implementation": "sdpa",
        "gradient_checkpointing": case.grad_ckpt, "logging_steps": 1, "save_strategy": "no",
        "dataset_num_proc": 1, "seed": 0, "use_tensorboard": False,
    }


def llamafactory_config(case: Any, model: Path, data: Path, out: Path, steps: int, cuda: bool) -> dict[str, Any]:
    method = {"finetuning_type": "full"} if case.method == "full" else {
        "finetuning_type": "lora", "lora_rank": LORA["r"], "lora_alpha": LORA["alpha"],
        "lora_dropout": LORA["dropout"], "lora_target": "all"}
    if case.method == "qlora":
        method.update(quantization_bit=4, quantization_method="bnb")
    return {
        "model_name_or_path": str(model), "trust_remote_code": False, "stage": "sft", "do_train": True, **method,
        "dataset": data.stem, "dataset_dir": str(data.parent), "template": "default", "cutoff_len": case.seq_len,
        "max_samples": 8 * steps, "overwrite_cache": True, "preprocessing_num_workers": 1,
        "output_dir": str(out), "overwrite_output_dir": True, "logging_steps": 1, "save_strategy": "no",
        "plot_loss": False, "report_to": "none", "per_device_train_batch_size": case.micro_batch,
        "gradient_accumulation_steps": 1, "max_steps": steps, "learning_rate": 2.0e-4, "lr_scheduler_type": "cosine",
        "optim": "adamw_torch_fused" if cuda else "adamw_torch", "bf16": cuda, "flash_attn": "sdpa",
        "disable_gradient_checkpointing": not case.grad_ckpt, "seed": 0,
    }


def axolotl_steps(log: str) -> list[dict[str, Any]]:
    """The per-step log dicts the Trainer prints, e.g. {'loss': '6.9', ..., 'memory/max_allocated (GiB)': '7.53'}.

    transformers' ProgressCallback prints floats with 4 significant digits (trainer_callback.py L684-686 at 5.16.1):
    axolotl's 2 decimals survive below 100 GiB. The closing summary (no 'loss') covers no step and is left out."""
    out = []
    for m in re.finditer(r"\{[^{}\n]*'memory/max_allocated \(GiB\)'[^{}\n]*\}", log):
        try:
            entry = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError):
            continue
        if "loss" in entry:
            out.append(entry)
    return out


def llamafactory_steps(text: str) -> list[dict[str, Any]]:
    """trainer_log.jsonl step lines (with a loss) that carry the VRAM fields (RECORD_VRAM=1)."""
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "vram_allocated" in entry and "loss" in entry:
            out.append(entry)
    return out


def read_steps(trainer: str, log: str, out: Path) -> list[dict[str, Any]]:
    if trainer == "axolotl":
        return axolotl_steps(log)
    path = out / "trainer_log.jsonl"
    return llamafactory_steps(path.read_text()) if path.exists() else []


def metrics(trainer: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per logged memory metric: the largest value over the steps, and every step's value."""
    out = []
    for name, (column, counter, window) in METRICS[trainer].items():
        values = [float(s[name]) for s in steps if name in s]
        if values:
            out.append({"metric": name, "value": max(values), "unit": "GiB", "csv_metric": column,
                        "torch_counter": counter, "window": window, "per_step": values})
    return out


def versions(python: str, env: dict[str, str], trainer: str) -> dict[str, str]:
    """Versions of the packages the trainer ran with, as its interpreter and environment see them."""
    code = ("import importlib.metadata as m, importlib.util as u, json; print(json.dumps({p: m.version(p) for p in "
            f"({PACKAGE[trainer]!r}, 'torch', 'transformers', 'peft', 'trl', 'accelerate', 'datasets', 'bitsandbytes') "
            "if u.find_spec(p)}))")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)


def gpu_short(name: str) -> str:
    """'NVIDIA H200' -> 'H200' (the CSV's gpu column)."""
    return re.sub(r"^NVIDIA\s+", "", name or "").strip()


def csv_rows(doc: dict[str, Any], taken: set[str]) -> list[dict[str, str]]:
    """The public CSV's rows for every ok run and metric; ids continue after those already taken."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cheaptune.catalog.models import count_params, resolve_model

    if doc.get("benchmark") != "gpu_trainer_rows" or not isinstance(doc.get("runs"), list):
        raise BadResult("not a gpu_trainer_rows result (no 'benchmark: gpu_trainer_rows' with 'runs')")
    if doc.get("mode") != "gpu":
        raise BadResult(f"mode {doc.get('mode')!r}: only a GPU run's figures go into the public CSV")
    gpu, date = gpu_short(doc["machine"].get("device", "")), doc.get("date", "")
    rows, n = [], {t: 0 for t in ID_PREFIX}
    for run in doc["runs"]:
        if run.get("status") != "ok":
            continue
        t = run["trainer"]
        params = count_params(resolve_model(run["model"]).config) / 1e9
        versions = ", ".join(f"{k} {v}" for k, v in run.get("version", {}).items())
        for m in run["metrics"]:
            n[t] += 1
            while f"{ID_PREFIX[t]}{n[t]}" in taken:
                n[t] += 1
            lora = run["method"] != "full"
            rows.append({
                "id": f"{ID_PREFIX[t]}{n[t]}", "model": run["model"], "params_b": f"{params:.2f}",
                "method": run["method"], "lora_r": str(LORA["r"]) if lora else "",
                "lora_targets": "all-linear" if lora else "", "precision": PRECISION.get((t, run["method"]), "bf16-mixed"),
                "quant": "nf4-dq" if run["method"] == "qlora" else "", "micro_batch": str(run["micro_batch"]),
                "seq_len": str(run["seq_len"]), "grad_ckpt": "yes" if run["grad_ckpt"] else "no",
                "optimizer": "adamw-fused", "attn": "sdpa", "num_gpus": "1", "sharding": "", "gpu": gpu,
                "metric": m["csv_metric"], "value": f"{m['value']:g}", "unit": m["unit"], "framework": FRAMEWORK[t],
                "source": f"measured by cheaptune bench/gpu_trainer_rows.py on {gpu}, {date}",
                "note": f"{versions}; logged as '{m['metric']}' = {m['torch_counter']} ({m['window']}), largest of "
                        f"{len(m['per_step'])} steps; config {run['config_file']} in the result file; random weights, "
                        f"alpaca rows cut to seq_len (no padding), LoRA alpha {LORA['alpha']} dropout {LORA['dropout']}",
                "source_date": date, "versions": versions, "source_group": "cheaptune-gpu-trainer-rows",
                "seq_len_kind": "fixed", "ckpt_kind": "",
            })
    return rows


def to_csv_main(result: Path, append: Path | None) -> list[dict[str, str]]:
    """--to-csv: print the rows (CSV, no header); with --append, add them to that CSV atomically."""
    try:
        doc = json.loads(result.read_text())
        existing = append.read_text() if append else ""
        taken = {r["id"] for r in csv.DictReader(io.StringIO(existing))} if existing else set()
        rows = csv_rows(doc, taken)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: {result}: {err}; pass a gpu_trainer_rows JSON written on a GPU (bench/README.md)",
              file=sys.stderr)
        raise SystemExit(2) from None
    buf = io.StringIO()
    csv.DictWriter(buf, COLUMNS, lineterminator="\n").writerows(rows)
    print(buf.getvalue(), end="")
    if append:
        from cheaptune.util.atomic import write_text

        sep = "" if existing.endswith("\n") or not existing else "\n"
        write_text(append, existing + sep + buf.getvalue())
    return rows
