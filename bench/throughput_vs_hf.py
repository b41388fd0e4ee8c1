"""Training speed of `cheaptune train` against a plain transformers Trainer + peft baseline, on this CPU.

Same model, same data (seeded, long-tailed lengths), one epoch each, same LoRA settings, same micro-batch
and accumulation (so the same tensor shape per step: micro_batch x seq_len), fp32 on CPU. The baseline is
written as the transformers/peft docs teach it: tokenise with padding to max_length, no packing, causal-LM
collator. cheaptune trains the same rows through its Python API (`cheaptune.train.run.train`), which packs
them (trl BFD, padding-free). Speed = REAL (non-pad) tokens per second of `trainer.train()`; each run is a
fresh subprocess and the two sides alternate, so drift on this shared machine hits both alike.

    python bench/throughput_vs_hf.py            # full: tiny Llama + SmolLM2-135M, 3 pairs each
    python bench/throughput_vs_hf.py --quick    # smoke: tiny Llama, one pair, in-process, < 60 s
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "throughput_vs_hf.json"
LORA = {"r": 16, "alpha": 32, "dropout": 0.05}
COMMON = {"learning_rate": 2e-4, "lr_scheduler": "cosine", "optimizer": "adamw_torch", "seed": 42}
MIN_LEN, MEDIAN_LEN, SIGMA = 20, 120, 0.9  # lognormal word counts: median 120, long right tail
WORDS = ("the", "model", "learns", "a", "task", "from", "examples", "and", "each", "answer", "should", "be",
         "short", "clear", "correct", "spot", "instances", "are", "cheap", "but", "can", "taken", "away", "so",
         "checkpoints", "keep", "work", "safe", "question", "what", "is", "two", "plus", "four", "translate")


def length_draws(n: int, seed: int, max_len: int) -> list[int]:
    """Target token counts: lognormal (real instruction data is long-tailed), clipped to [20, max_len]."""
    rng = random.Random(seed)
    return [max(MIN_LEN, min(max_len, int(rng.lognormvariate(math.log(MEDIAN_LEN), SIGMA)))) for _ in range(n)]


def write_rows(path: Path, tokenizer: Any, n: int, seed: int, max_len: int) -> list[int]:
    """JSONL `text` rows cut to their drawn token counts with the model's own tokenizer; returns the lengths."""
    rng = random.Random(seed + 1)
    lengths = []
    with path.open("w") as f:
        for target in length_draws(n, seed, max_len):
            ids = tokenizer(" ".join(rng.choice(WORDS) for _ in range(target)), add_special_tokens=False)["input_ids"]
            text = tokenizer.decode(ids[:target])
            lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
            f.write(json.dumps({"text": text}) + "\n")
    return lengths


def run_cheaptune(s: dict[str, Any]) -> dict[str, Any]:
    """What a user runs: a config through cheaptune's Python API (the CLI calls the same function)."""
    from cheaptune.train.config import build
    from cheaptune.train.run import train

    cfg = build(None, overrides={
        "base_model": s["model_dir"], "method": "lora", "lora_r": LORA["r"], "lora_alpha": LORA["alpha"],
        "lora_dropout": LORA["dropout"], "datasets": [{"path": s["data"], "type": "text"}],
        "sequence_len": s["seq_len"], "micro_batch_size": s["micro_batch"],
        "gradient_accumulation_steps": s["grad_accum"], "num_epochs": 1, "output_dir": s["out"],
        "device": "cpu", "resume": "never", "logging_steps": 1, "dataset_num_proc": 1, **COMMON,
    })
    summary = train(cfg).summary
    return {"real_tokens": summary["tokens"], "train_seconds": summary["seconds_this_segment"],
            "steps": summary["steps"], "final_loss": summary["final_train_loss"]}


def run_baseline(s: dict[str, Any]) -> dict[str, Any]:
    """A plain Trainer + peft script as the docs teach it: pad every row to max_length, no packing."""
    import torch
    from datasets import load_dataset
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(COMMON["seed"])
    tok = AutoTokenizer.from_pretrained(s["model_dir"])
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ds = load_dataset("json", data_files=s["data"], split="train")
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=s["seq_len"], padding="max_length"),
                batched=True, remove_columns=["text"])
    model = AutoModelForCausalLM.from_pretrained(s["model_dir"], dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                             target_modules="all-linear", task_type="CAUSAL_LM"))
    args = TrainingArguments(
        output_dir=s["out"], per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=s["grad_accum"], num_train_epochs=1, learning_rate=COMMON["learning_rate"],
        lr_scheduler_type=COMMON["lr_scheduler"], optim=COMMON["optimizer"], seed=COMMON["seed"],
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    start = time.monotonic()
    out = trainer.train()
    seconds = time.monotonic() - start
    return {"real_tokens": int(sum(sum(m) for m in ds["attention_mask"])), "train_seconds": round(seconds, 3),
            "steps": trainer.state.global_step, "final_loss": out.training_loss}


# Per-model sizes for the full run: SmolLM2 at 1024 tokens on one shared CPU core takes minutes per padded
# run, so its rows are capped at 500 tokens (still a 25x spread); flags override these.
MODEL_DEFAULTS = {
    "tiny-llama": {"rows": 48, "seq_len": 1024, "max_len": 1000},
    "smollm2-135m": {"rows": 8, "seq_len": 512, "max_len": 500},
}
SIDES = {"cheaptune": run_cheaptune, "hf_baseline": run_baseline}


def run_side(side: str, s: dict[str, Any], subprocess_mode: bool) -> dict[str, Any]:
    """One timed run; in a fresh process (full mode) so neither side inherits the other's warm caches."""
    out = Path(s["work"]) / f"{side}_{time.monotonic_ns()}"
    s = {**s, "out": str(out)}
    start = time.monotonic()
    if subprocess_mode:
        proc = subprocess.run([sys.executable, __file__, "--worker", side, "--settings", json.dumps(s)],
                              capture_output=True, text=True, env=os.environ.copy(), check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{side} run failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    else:
        res = SIDES[side](s)
    res["wall_seconds"] = round(time.monotonic() - start, 3)
    res["tokens_per_s"] = round(res["real_tokens"] / res["train_seconds"], 2)
    return res


def prepare_model(name: str, work: Path) -> Path:
    if name == "tiny-llama":
        from cheaptune.demo.tiny import build_tiny_llama

        return build_tiny_llama(work / "tiny", max_position_embeddings=2048)
    from cheaptune.demo.smollm2 import ensure_demo_model

    return ensure_demo_model()


def bench_model(name: str, args: argparse.Namespace, work: Path, subprocess_mode: bool) -> dict[str, Any]:
    from transformers import AutoTokenizer

    a = argparse.Namespace(**{**vars(args), **{k: v for k, v in MODEL_DEFAULTS[name].items()
                                               if getattr(args, k) is None}})
    if a.max_len > a.seq_len:
        raise SystemExit(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}; rows would be truncated")
    model_dir = prepare_model(name, work)
    data = work / f"{name}.jsonl"
    lengths = write_rows(data, AutoTokenizer.from_pretrained(model_dir), a.rows, a.seed, a.max_len)
    s = {"model_dir": str(model_dir), "data": str(data), "seq_len": a.seq_len, "micro_batch": a.micro_batch,
         "grad_accum": a.grad_accum, "work": str(work)}
    pairs = []
    for i in range(a.pairs):
        order = ("cheaptune", "hf_baseline") if i % 2 == 0 else ("hf_baseline", "cheaptune")
        pair = {side: run_side(side, s, subprocess_mode) for side in order}
        pair["ratio"] = round(pair["cheaptune"]["tokens_per_s"] / pair["hf_baseline"]["tokens_per_s"], 3)
        print(f"{name} pair {i + 1}/{a.pairs}: cheaptune {pair['cheaptune']['tokens_per_s']} tok/s, "
              f"baseline {pair['hf_baseline']['tokens_per_s']} tok/s, ratio {pair['ratio']}", flush=True)
        pairs.append(pair)
    ratios = [p["ratio"] for p in pairs]
    return {
        "model": name,
        "seq_len": a.seq_len,
        "dataset": {"rows": a.rows, "seed": a.seed, "real_tokens": sum(lengths), "min": min(lengths),
                    "median": statistics.median(lengths), "mean": round(statistics.fmean(lengths), 1),
                    "max": max(lengths), "padding_fraction_baseline": round(1 - sum(lengths) / (a.rows * a.seq_len), 3)},
        "pairs": pairs,
        "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
    }


def machine() -> dict[str, Any]:
    import torch

    return {"cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "python": platform.python_version()}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke: tiny model, small data, one in-process pair")
    p.add_argument("--models", default="tiny-llama,smollm2-135m", help="comma list: tiny-llama, smollm2-135m")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--rows", type=int, help="rows per dataset (default per model: MODEL_DEFAULTS)")
    p.add_argument("--seq-len", type=int, help="max_length / packed length (default per model)")
    p.add_argument("--max-len", type=int, help="longest row in tokens (default per model)")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=sorted(SIDES), help=argparse.SUPPRESS)
    p.add_argument("--settings", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.models, a.pairs, a.rows, a.seq_len, a.max_len = "tiny-llama", 1, 16, 256, 250
    if a.max_len and a.seq_len and a.max_len > a.seq_len:
        p.error(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}; rows would be truncated")
    return a


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    a = parse(argv)
    if a.worker:
        print(json.dumps(SIDES[a.worker](json.loads(a.settings))), flush=True)
        return None
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="ct_bench_") as tmp:
        work = Path(tmp)
        os.environ["CHEAPTUNE_HOME"] = os.environ.get("CHEAPTUNE_BENCH_HOME") or str(work / "home")
        models = [bench_model(m.strip(), a, work, subprocess_mode=not a.quick) for m in a.models.split(",")]
    result = {
        "benchmark": "throughput_vs_hf", "date": dt.date.today().isoformat(), "machine": machine(),
        "settings": {"mode": "quick" if a.quick else "full", "pairs": a.pairs, "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "lora": LORA, **COMMON,
                     "precision": "fp32 (CPU)", "epochs": 1,
                     "lengths": f"lognormal median {MEDIAN_LEN} sigma {SIGMA}, clipped to [{MIN_LEN}, max_len]",
                     "speed": "real (non-pad) tokens / seconds of trainer.train(), fresh process per run"},
        "target_ratio": 1.5,
        "models": models,
    }
    from cheaptune.util import atomic

    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(a.out, json.dumps(result, indent=2) + "\n")
    for m in models:
        r = m["ratio"]
        print(f"{m['model']}: cheaptune / baseline tokens/s = {r['median']:.2f}x (min {r['min']:.2f}, max {r['max']:.2f})")
    return result


if __name__ == "__main__":
    main()
