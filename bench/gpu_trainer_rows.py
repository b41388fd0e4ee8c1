"""Peak GPU memory of Axolotl and LLaMA-Factory runs, read from each trainer's own memory log (issue 13's rows).

No public Axolotl or LLaMA-Factory measurement with recoverable settings was found, so we measure: each case
writes the trainer's own YAML, runs the trainer's real entry point in a fresh process (10 optimizer steps,
one log per step) and keeps the memory figures the trainer itself logged. What each figure is, in the source
of the versions that run (the wheels in bench/gpu_trainer_wheels.txt):
- axolotl 0.19.0, src/axolotl/core/trainers/base.py L746-751 (AxolotlTrainer.log) logs
  `memory/max_active (GiB)`, `memory/max_allocated (GiB)`, `memory/device_reserved (GiB)` from
  utils/bench.py L58-64 gpu_memory_usage_all: memory_stats()["active_bytes.all.peak"],
  torch.cuda.max_memory_allocated() and max_memory_reserved() (the "device_reserved" name notwithstanding,
  a peak), then torch.cuda.reset_peak_memory_stats(): each log holds the peak since the previous one. The
  first window opens at the load-time log (loaders/model.py L275 "after model load", L608 "after adapters").
- llamafactory 0.9.5, src/llamafactory/train/callbacks.py L295-298 (LogCallback.on_log, env RECORD_VRAM=1)
  writes `vram_allocated` and `vram_reserved` to <output_dir>/trainer_log.jsonl from extras/misc.py L222-233
  get_peak_memory: torch.cuda.max_memory_allocated() / max_memory_reserved() since the process started,
  never reset (the model load is inside it).
A row's value is the largest over the logged steps. Models are built from the catalog configs with random
weights (no hub), saved as bf16 safetensors with cheaptune's small BPE tokenizer (ids < 512, below every
vocabulary); alpaca rows are longer than the sequence length and cut to it (axolotl excess_length_strategy
truncate; LLaMA-Factory cutoff_len), so every micro-batch is exactly seq_len tokens with no padding.

    python bench/gpu_trainer_rows.py --out $OUT/gpu_trainer_rows.json   # device machine (bench/README.md)
    python bench/gpu_trainer_rows.py --cpu-smoke --python axolotl=/tmp/ax-venv/bin/python ...
    python bench/gpu_trainer_rows.py --to-csv RESULT [--append bench/data/vram_measured_public.csv]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trainer_logs  # noqa: E402

TRAINERS = ("axolotl", "llama-factory")
MODELS = ("meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-3B")
SMOKE_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024}
WORDS = ("fine", "tune", "model", "data", "cost", "memory", "spot", "cloud", "price", "token", "batch", "layer",
         "weight", "adapter", "step", "loss", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "answer")


@dataclass(frozen=True)
class Case:
    trainer: str
    model: str
    method: str  # lora | full | qlora
    seq_len: int
    micro_batch: int
    grad_ckpt: bool
    # axolotl turns its fused LoRA kernels on by itself (utils/schemas/config.py L2063-2075); False sets them off
    lora_kernels: bool = True

    @property
    def name(self) -> str:
        ckpt = "ckpt" if self.grad_ckpt else "nockpt"
        kernels = "" if self.lora_kernels else "+nokernels"
        return f"{self.trainer}/{self.model.split('/')[-1]}/{self.method}/s{self.seq_len}/b{self.micro_batch}/{ckpt}{kernels}"


def cases(trainers: tuple[str, ...], methods: tuple[str, ...], smoke: bool) -> list[Case]:
    """Per trainer: 1B LoRA s2048 x2 with and without checkpointing, s1024 x1; 1B full; 3B LoRA; QLoRA last.
    Axolotl adds its 1B LoRA run without its fused LoRA kernels (what the estimator's axolotl profile simulates)."""
    if smoke:
        grid = [(MODELS[0], "lora", 256, 2, False), (MODELS[0], "full", 256, 1, True), (MODELS[0], "qlora", 256, 1, True)]
    else:
        one, three = MODELS
        grid = [(one, "lora", 2048, 2, True), (one, "lora", 2048, 2, False), (one, "lora", 1024, 1, False),
                (one, "full", 1024, 1, True), (one, "full", 2048, 2, True), (three, "lora", 2048, 1, True),
                (three, "lora", 1024, 2, False), (one, "qlora", 2048, 2, True), (three, "qlora", 1024, 1, True)]
    out = [Case(t, *g) for g in grid for t in trainers if g[1] in methods]
    if "axolotl" in trainers and "lora" in methods and not smoke:  # the same run on plain peft LoRA layers
        out.insert(2, Case("axolotl", MODELS[0], "lora", 2048, 2, True, lora_kernels=False))
    return out


def build_model(name: str, smoke: bool, folder: Path, cuda: bool) -> Path:
    """A random-weight model of the catalog config, saved as safetensors with the tokenizer (built once)."""
    import torch
    from transformers import AutoModelForCausalLM

    from cheaptune.catalog.models import resolve_model, to_hf_config
    from cheaptune.demo.tiny import train_tokenizer

    out = folder / name.replace("/", "--")
    if (out / "config.json").exists():
        return out
    dtype = torch.float32 if smoke else torch.bfloat16
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(to_hf_config(resolve_model(name), **(SMOKE_SHAPE if smoke else {})),
                                                 dtype=dtype)
    model.save_pretrained(out, safe_serialization=True)
    train_tokenizer().save_pretrained(out)
    del model
    if cuda:
        torch.cuda.empty_cache()
    return out


def write_dataset(folder: Path, seq_len: int, rows: int) -> Path:
    """Alpaca rows whose response alone is longer than seq_len tokens: cut to seq_len, never padded."""
    import random

    from cheaptune.demo.tiny import train_tokenizer

    tok, rng = train_tokenizer(), random.Random(seq_len)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"alpaca_s{seq_len}.jsonl"
    with path.open("w") as f:
        for _ in range(rows):
            output = " ".join(rng.choice(WORDS) for _ in range(seq_len + 16))
            assert len(tok(output)["input_ids"]) > seq_len  # every word is at least one token
            row = {"instruction": " ".join(rng.choice(WORDS) for _ in range(seq_len // 16)), "input": "",
                   "output": output}
            f.write(json.dumps(row) + "\n")
    (folder / "dataset_info.json").write_text(json.dumps(  # LLaMA-Factory's registry of local datasets
        {p.stem: {"file_name": p.name} for p in folder.glob("alpaca_s*.jsonl")}, indent=1))
    return path


def write_config(case: Case, model: Path, data: Path, work: Path, steps: int, cuda: bool) -> tuple[Path, Path]:
    """The trainer's YAML for the case (its text goes verbatim into the result) and its output folder."""
    import yaml

    out = work / case.name.replace("/", "_")
    cfg = (trainer_logs.axolotl_config if case.trainer == "axolotl" else trainer_logs.llamafactory_config)(
        case, model, data, out, steps, cuda)
    path = work / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, out


def stub_wandb(work: Path) -> Path:
    """An empty `wandb` module: axolotl 0.19 imports wandb at module level (utils/callbacks/__init__.py L18) even
    with use_wandb off; the real 20 MB wheel would not fit the device's carry limit beside bitsandbytes. Placed
    after the trainer's own site dir, so a real wandb there wins."""
    folder = work / "stubs"
    (folder / "wandb").mkdir(parents=True, exist_ok=True)
    (folder / "wandb" / "__init__.py").write_text('"""Empty stand-in (bench/gpu_trainer_rows.py stub_wandb)."""\n')
    return folder


def run_case(case: Case, cfg: Path, out: Path, python: str, pythonpath: str | None, timeout: float) -> dict[str, Any]:
    """Run the trainer in its own process; read back its memory log (stdout or trainer_log.jsonl)."""
    import subprocess

    env = {**os.environ, "RECORD_VRAM": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled", "DO_NOT_TRACK": "1", "AXOLOTL_DO_NOT_TRACK": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
           "HF_DATASETS_CACHE": str(out / "hf_datasets")}  # runs at once must not share one datasets cache
    # only the trainer's own site dirs: the parent's PYTHONPATH (cheaptune, the other trainer's pins) stays out
    extra = [pythonpath, str(stub_wandb(cfg.parent))] if case.trainer == "axolotl" else [pythonpath]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, extra))
    cmd = [python, "-m", "axolotl.cli.train", str(cfg)] if case.trainer == "axolotl" else \
        [python, "-c", "from llamafactory.train.tuner import run_exp; run_exp()", str(cfg)]
    row: dict[str, Any] = {"case": case.name, **asdict(case), "config_file": cfg.name, "config": cfg.read_text(),
                           "command": cmd[1:]}
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cfg.parent)
        log, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        log, rc = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(errors="replace"), None
    row["seconds"] = round(time.monotonic() - start, 1)
    (cfg.parent / f"{out.name}.log").write_text(log)
    steps = trainer_logs.read_steps(case.trainer, log, out)
    row.update(returncode=rc, steps_logged=len(steps), metrics=trainer_logs.metrics(case.trainer, steps),
               version=trainer_logs.versions(python, env, case.trainer))
    row["status"] = "ok" if rc == 0 and row["metrics"] else "timeout" if rc is None else "error"
    if row["status"] != "ok":
        row["log_tail"] = log[-3000:]
    return row


def machine(cuda: bool) -> dict[str, Any]:
    import platform

    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "device": "cpu"}
    if cuda:
        p = torch.cuda.get_device_properties(0)
        out.update(device=p.name, device_total_bytes=p.total_memory, cuda=torch.version.cuda)
    return out


def pairs(items: list[str], what: str) -> dict[str, str]:
    """TRAINER=VALUE command-line pairs."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in TRAINERS:
            raise SystemExit(f"error: {what} {item!r}: write TRAINER=VALUE with TRAINER one of {', '.join(TRAINERS)}")
        out[key] = value
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="results JSON (default: $OUT/gpu_trainer_rows.json)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny model, seq 256, 2 steps on CPU")
    p.add_argument("--trainers", default=",".join(TRAINERS))
    p.add_argument("--methods", default="lora,full,qlora")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--jobs", type=int, default=3, help="trainer processes at once (torch's peaks are per process)")
    p.add_argument("--max-seconds", type=float, default=420.0, help="deadline: later cases are skipped")
    p.add_argument("--python", action="append", default=[], metavar="TRAINER=EXE", help="interpreter per trainer")
    p.add_argument("--pythonpath", action="append", default=[], metavar="TRAINER=DIR", help="site dir per trainer")
    p.add_argument("--to-csv", type=Path, metavar="RESULT", help="print a result's rows in the public CSV's columns")
    p.add_argument("--append", type=Path, metavar="CSV", help="with --to-csv: append the rows to this CSV")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any] | list[dict[str, str]]:
    a = parse(argv)
    if a.to_csv:
        return trainer_logs.to_csv_main(a.to_csv, a.append)
    t0 = time.monotonic()
    import torch

    cuda = torch.cuda.is_available() and not a.cpu_smoke
    trainers = tuple(t.strip() for t in a.trainers.split(",") if t.strip())
    pythons, paths = pairs(a.python, "--python"), pairs(a.pythonpath, "--pythonpath")
    todo = cases(trainers, tuple(a.methods.split(",")), a.cpu_smoke)
    steps = 2 if a.cpu_smoke else a.steps
    work = Path(tempfile.mkdtemp(prefix="gpu_trainer_rows_"))
    models = {m: build_model(m, a.cpu_smoke, work / "models", cuda) for m in dict.fromkeys(c.model for c in todo)}
    data = {s: write_dataset(work / "data", s, 8 * steps) for s in sorted({c.seq_len for c in todo})}
    doc: dict[str, Any] = {"benchmark": "gpu_trainer_rows", "date": dt.date.today().isoformat(),
                           "mode": "cpu-smoke" if a.cpu_smoke else "gpu", "machine": machine(cuda),
                           "steps_per_case": steps, "build_seconds": round(time.monotonic() - t0, 1), "runs": []}
    out = a.out or Path(os.environ.get("OUT", ".")) / "gpu_trainer_rows.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def one(c: Case) -> dict[str, Any]:
        left = a.max_seconds - (time.monotonic() - t0)
        if left < 30:
            return {"case": c.name, **asdict(c), "status": "skipped", "reason": f"deadline ({a.max_seconds:.0f} s)"}
        try:
            cfg, cout = write_config(c, models[c.model], data[c.seq_len], work, steps, cuda)
            return run_case(c, cfg, cout, pythons.get(c.trainer, sys.executable), paths.get(c.trainer), left)
        except Exception as err:  # one broken run must not lose the others' measurements
            return {"case": c.name, **asdict(c), "status": "error", "reason": f"{type(err).__name__}: {err}"[:300]}

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for row in pool.map(one, todo):
            doc["runs"].append(row)
            doc["seconds"] = round(time.monotonic() - t0, 1)
            trainer_logs.write_json(out, doc)  # after every run: a call cut at its limit keeps what it measured
            print(f"[{doc['seconds']:6.1f}s] {row['case']}: {row['status']} "
                  f"{json.dumps(row.get('metrics') or row.get('reason') or row.get('log_tail', '')[-300:])[:400]}",
                  flush=True)
    print(f"wrote {out} ({sum(r['status'] == 'ok' for r in doc['runs'])} of {len(todo)} runs ok)")
    return doc


if __name__ == "__main__":
    main()
