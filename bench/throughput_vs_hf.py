"""Training speed of `cheaptune train` against the two fair baselines a user would otherwise run, on this CPU.

Three sides train the same rows (seeded, long-tailed lengths, EOS appended) for one epoch with the same
LoRA, optimizer, precision (fp32 on CPU), gradient-checkpointing setting and number of optimizer steps:
- `trl_default`: trl's SFTTrainer at its defaults: no packing, each micro-batch padded to its longest row;
- `hf_grouped`: a transformers Trainer sampling `group_by_length` (rows of similar length share a micro-batch)
  and dynamic padding (`DataCollatorForLanguageModeling`);
- `cheaptune`: `cheaptune.train.run.train` (what the CLI calls): trl BFD packing, padding-free, micro-batch 1.
The baselines take `micro_batch` rows per micro-step; cheaptune's packed length is the smallest that packs
the rows into exactly as many sequences as the baselines have micro-steps, so all three see the same tokens
in the same number of micro-steps and optimizer steps (checked after each run). Speed = REAL (non-pad)
tokens / seconds from the first to the last training step (one callback times every side), both wall
time and this process's CPU time: the machine is shared and runs single-threaded (OMP_NUM_THREADS=1), so
CPU seconds are the load-robust figure and wall seconds what a user waits. Each run is a fresh process; the
sides rotate; the figure is the median over `--runs` rounds, with the load average before each run recorded.

    python bench/throughput_vs_hf.py            # full: tiny Llama + SmolLM2-135M, 3 rounds
    python bench/throughput_vs_hf.py --quick    # smoke: tiny Llama, one in-process round, < 60 s
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
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

from run_record import stamp
from transformers import TrainerCallback

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "throughput_vs_hf.json"
LORA = {"r": 16, "alpha": 32, "dropout": 0.0}
COMMON = {"learning_rate": 2e-4, "lr_scheduler": "cosine", "optimizer": "adamw_torch", "seed": 42}
MIN_LEN, MEDIAN_LEN, SIGMA = 20, 120, 0.9  # lognormal word counts: median 120, long right tail
WORDS = ("the", "model", "learns", "a", "task", "from", "examples", "and", "each", "answer", "should", "be",
         "short", "clear", "correct", "spot", "instances", "are", "cheap", "but", "can", "taken", "away", "so",
         "checkpoints", "keep", "work", "safe", "question", "what", "is", "two", "plus", "four", "translate")
BASELINES = ("trl_default", "hf_grouped")


def length_draws(n: int, seed: int, max_len: int) -> list[int]:
    """Target token counts: lognormal (real instruction data is long-tailed), clipped to [20, max_len]."""
    rng = random.Random(seed)
    return [max(MIN_LEN, min(max_len, int(rng.lognormvariate(math.log(MEDIAN_LEN), SIGMA)))) for _ in range(n)]


def write_rows(path: Path, tokenizer: Any, n: int, seed: int, max_len: int) -> list[int]:
    """JSONL `text` rows cut to their drawn token counts, EOS-terminated; returns each row's token count
    as trl tokenises it (trl appends EOS only when the text lacks it, so every side sees the same ids)."""
    rng = random.Random(seed + 1)
    lengths = []
    with path.open("w") as f:
        for target in length_draws(n, seed, max_len):
            ids = tokenizer(" ".join(rng.choice(WORDS) for _ in range(target)), add_special_tokens=False)["input_ids"]
            text = tokenizer.decode(ids[:target - 1]) + tokenizer.eos_token
            lengths.append(len(tokenizer(text)["input_ids"]))
            f.write(json.dumps({"text": text}) + "\n")
    return lengths


def packed_count(lengths: list[int], seq_len: int) -> int:
    """How many sequences trl's BFD packing (the one cheaptune trains with) makes of these rows."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    return len(pack_dataset(Dataset.from_dict({"input_ids": [[1] * n for n in lengths]}), seq_len, "bfd"))


def matching_seq_len(lengths: list[int], sequences: int) -> int:
    """The smallest packed length >= the longest row that packs the rows into `sequences` sequences."""
    lo, hi = max(lengths), sum(lengths)
    if packed_count(lengths, lo) < sequences:
        raise SystemExit(f"rows of up to {lo} tokens pack into fewer than {sequences} sequences; raise "
                         "--micro-batch or lower --max-len so each micro-step holds as many tokens as a packed row")
    while lo < hi:  # the count falls as the length grows
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if packed_count(lengths, mid) > sequences else (lo, mid)
    if packed_count(lengths, lo) != sequences:
        raise SystemExit(f"no packed length gives exactly {sequences} sequences; change --rows or --seed")
    return lo


class StepClock(TrainerCallback):
    """Wall and CPU seconds from train begin to train end: the same span for every side."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.wall, self.cpu = time.monotonic(), time.process_time()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.wall, self.cpu = time.monotonic() - self.wall, time.process_time() - self.cpu


def run_cheaptune(s: dict[str, Any]) -> dict[str, Any]:
    """What a user runs: a config through cheaptune's Python API (the CLI calls the same function)."""
    from cheaptune.train.config import build
    from cheaptune.train.run import train

    cfg = build(None, overrides={
        "base_model": s["model_dir"], "method": "lora", "lora_r": LORA["r"], "lora_alpha": LORA["alpha"],
        "lora_dropout": LORA["dropout"], "datasets": [{"path": s["data"], "type": "text"}],
        "sequence_len": s["packed_len"], "micro_batch_size": 1, "gradient_accumulation_steps": s["grad_accum"],
        "num_epochs": 1, "output_dir": s["out"], "device": "cpu", "resume": "never", "logging_steps": 1,
        "dataset_num_proc": 1, **COMMON,
    })
    clock = StepClock()
    summary = train(cfg, callbacks=(clock,)).summary
    return {"real_tokens": summary["tokens"], "train_seconds": round(clock.wall, 3),
            "cpu_seconds": round(clock.cpu, 3), "steps": summary["steps"], "final_loss": summary["final_train_loss"]}


def _train(trainer: Any) -> dict[str, Any]:
    clock = StepClock()
    trainer.add_callback(clock)
    out = trainer.train()
    return {"real_tokens": int(trainer.state.num_input_tokens_seen), "train_seconds": round(clock.wall, 3),
            "cpu_seconds": round(clock.cpu, 3), "steps": trainer.state.global_step, "final_loss": out.training_loss}


def _model_and_args(s: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The shared part of both baselines: fp32 model, LoRA, and the same TrainingArguments values."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, set_seed

    set_seed(COMMON["seed"])
    model = AutoModelForCausalLM.from_pretrained(s["model_dir"], dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                             target_modules="all-linear", task_type="CAUSAL_LM"))
    args = {"output_dir": s["out"], "per_device_train_batch_size": s["micro_batch"],
            "gradient_accumulation_steps": s["grad_accum"], "num_train_epochs": 1,
            "learning_rate": COMMON["learning_rate"], "lr_scheduler_type": COMMON["lr_scheduler"],
            "optim": COMMON["optimizer"], "seed": COMMON["seed"], "logging_steps": 1, "save_strategy": "no",
            "report_to": "none", "use_cpu": True, "disable_tqdm": True, "bf16": False,
            "gradient_checkpointing": False, "include_num_input_tokens_seen": "non_padding"}
    return model, args


def run_trl_default(s: dict[str, Any]) -> dict[str, Any]:
    """trl's SFTTrainer at its defaults (no packing: per-batch padding); only precision, device, optimizer and
    checkpointing set, to match the other sides (trl would default to bf16 and gradient checkpointing)."""
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    model, args = _model_and_args(s)
    ds = load_dataset("json", data_files=s["data"], split="train")
    trainer = SFTTrainer(model=model, args=SFTConfig(**args, max_length=s["seq_len"]), train_dataset=ds,
                         processing_class=AutoTokenizer.from_pretrained(s["model_dir"]))
    return _train(trainer)


def run_hf_grouped(s: dict[str, Any]) -> dict[str, Any]:
    """A transformers Trainer with group_by_length and dynamic padding: the plain-HF way to cut padding."""
    from datasets import load_dataset
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    model, args = _model_and_args(s)
    tok = AutoTokenizer.from_pretrained(s["model_dir"])
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ds = load_dataset("json", data_files=s["data"], split="train")
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=s["seq_len"]), batched=True,
                remove_columns=["text"])
    trainer = Trainer(model=model, args=TrainingArguments(**args, train_sampling_strategy="group_by_length"), train_dataset=ds,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    return _train(trainer)


# Per-model sizes for the full run (SmolLM2 on one shared CPU core is slow); flags override these.
MODEL_DEFAULTS = {
    "tiny-llama": {"rows": 48, "seq_len": 1024, "max_len": 1000},
    "smollm2-135m": {"rows": 16, "seq_len": 512, "max_len": 500},
}
SIDES = {"cheaptune": run_cheaptune, "trl_default": run_trl_default, "hf_grouped": run_hf_grouped}


def run_side(side: str, s: dict[str, Any], subprocess_mode: bool) -> dict[str, Any]:
    """One timed run; in a fresh process (full mode) so no side inherits another's warm caches."""
    s = {**s, "out": str(Path(s["work"]) / f"{side}_{time.monotonic_ns()}")}
    load = os.getloadavg()[0]
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
    res["load_average_1m_before"] = round(load, 2)
    res["tokens_per_s"] = round(res["real_tokens"] / res["train_seconds"], 2)
    res["tokens_per_cpu_s"] = round(res["real_tokens"] / res["cpu_seconds"], 2)
    return res


def prepare_model(name: str, work: Path) -> Path:
    if name == "tiny-llama":
        from cheaptune.demo.tiny import build_tiny_llama

        return build_tiny_llama(work / "tiny", max_position_embeddings=2048)
    from cheaptune.demo.smollm2 import ensure_demo_model

    return ensure_demo_model()


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median tokens per CPU second and per wall second for each side over the rounds, and cheaptune's ratio
    to each baseline's median (`ratio`: CPU time, the load-robust one; `ratio_wall`: wall time)."""
    out: dict[str, Any] = {}
    for key, speed in (("", "tokens_per_cpu_s"), ("_wall", "tokens_per_s")):
        med = {side: statistics.median(r[side][speed] for r in runs) for side in SIDES}
        out[f"median_{speed}"] = med
        out[f"ratio{key}"] = {b: round(med["cheaptune"] / med[b], 3) for b in BASELINES}
        out[f"ratio{key}_per_round"] = {b: [round(r["cheaptune"][speed] / r[b][speed], 3) for r in runs]
                                        for b in BASELINES}
    return out


def bench_model(name: str, args: argparse.Namespace, work: Path, subprocess_mode: bool) -> dict[str, Any]:
    from transformers import AutoTokenizer

    a = argparse.Namespace(**{**vars(args), **{k: v for k, v in MODEL_DEFAULTS[name].items()
                                               if getattr(args, k) is None}})
    if a.max_len > a.seq_len:
        raise SystemExit(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}; rows would be truncated")
    model_dir = prepare_model(name, work)
    data = work / f"{name}.jsonl"
    lengths = write_rows(data, AutoTokenizer.from_pretrained(model_dir), a.rows, a.seed, a.max_len)
    micro_steps = math.ceil(a.rows / a.micro_batch)
    s = {"model_dir": str(model_dir), "data": str(data), "seq_len": a.seq_len, "micro_batch": a.micro_batch,
         "grad_accum": a.grad_accum, "work": str(work), "packed_len": matching_seq_len(lengths, micro_steps)}
    runs = []
    for i in range(a.runs):
        order = list(SIDES)[i % 3:] + list(SIDES)[:i % 3]
        rnd = {side: run_side(side, s, subprocess_mode) for side in order}
        steps = {side: rnd[side]["steps"] for side in SIDES}
        if len(set(steps.values())) != 1:
            raise RuntimeError(f"{name}: the sides took different numbers of optimizer steps: {steps}")
        print(f"{name} round {i + 1}/{a.runs}: " + ", ".join(f"{k} {rnd[k]['tokens_per_cpu_s']} tok/cpu-s "
                                                             f"{rnd[k]['tokens_per_s']} tok/s" for k in SIDES),
              flush=True)
        runs.append(rnd)
    return {
        "model": name,
        "seq_len": a.seq_len,
        "packed_len": s["packed_len"],
        "dataset": {"rows": a.rows, "seed": a.seed, "real_tokens": sum(lengths), "min": min(lengths),
                    "median": statistics.median(lengths), "mean": round(statistics.fmean(lengths), 1),
                    "max": max(lengths), "micro_steps": micro_steps,
                    "optimizer_steps": math.ceil(micro_steps / a.grad_accum)},
        "runs": runs,
        **summarise(runs),
    }


def machine() -> dict[str, Any]:
    import torch

    return {"cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "load_average_start": [round(x, 2) for x in os.getloadavg()], "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "python": platform.python_version(),
            "versions": {p: md.version(p) for p in ("torch", "transformers", "trl", "peft", "accelerate")}}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke: tiny model, small data, one in-process round")
    p.add_argument("--models", default="tiny-llama,smollm2-135m", help="comma list: tiny-llama, smollm2-135m")
    p.add_argument("--runs", type=int, default=3, help="rounds (each runs every side once); the median is reported")
    p.add_argument("--rows", type=int, help="rows per dataset (default per model: MODEL_DEFAULTS)")
    p.add_argument("--seq-len", type=int, help="the baselines' max_length (default per model)")
    p.add_argument("--max-len", type=int, help="longest row in tokens (default per model)")
    p.add_argument("--micro-batch", type=int, default=4, help="the baselines' rows per micro-step")
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=sorted(SIDES), help=argparse.SUPPRESS)
    p.add_argument("--settings", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.models, a.runs, a.rows, a.seq_len, a.max_len = "tiny-llama", 1, 16, 256, 250
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
        start_machine = machine()
        models = [bench_model(m.strip(), a, work, subprocess_mode=not a.quick) for m in a.models.split(",")]
    result = {
        "benchmark": "throughput_vs_hf", "date": dt.date.today().isoformat(),
        "machine": {**start_machine, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"mode": "quick" if a.quick else "full", "runs": a.runs, "micro_batch": a.micro_batch,
                     "grad_accum": a.grad_accum, "lora": LORA, **COMMON, "precision": "fp32 (CPU)",
                     "gradient_checkpointing": False, "epochs": 1,
                     "lengths": f"lognormal median {MEDIAN_LEN} sigma {SIGMA}, clipped to [{MIN_LEN}, max_len], EOS",
                     "speed": "real (non-pad) tokens / seconds from train begin to train end (CPU seconds of the process: "
                              "ratio; wall seconds: ratio_wall), fresh process per run"},
        "target_ratio": 1.5,
        "models": models,
    }
    from cheaptune.util import atomic

    a.out.parent.mkdir(parents=True, exist_ok=True)
    result = stamp(result)
    atomic.write_text(a.out, json.dumps(result, indent=2) + "\n")
    for m in models:
        print(f"{m['model']}: cheaptune / trl defaults = {m['ratio']['trl_default']:.2f}x, cheaptune / HF Trainer "
              f"group_by_length = {m['ratio']['hf_grouped']:.2f}x (CPU time; wall: "
              f"{m['ratio_wall']['trl_default']:.2f}x, {m['ratio_wall']['hf_grouped']:.2f}x; medians of {a.runs})")
    return result


if __name__ == "__main__":
    main()
