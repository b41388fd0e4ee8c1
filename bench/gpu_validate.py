"""Real training steps on a GPU beside cheaptune's predictions: memory (estimate) and tokens/s (throughput).

For a session lent a GPU machine (bench/README.md says how to run it there). Models are built from the
catalog configs with random weights (no hub), then trained for a few steps through the trainer's own code:
`TrainConfig` -> `resolve_precision` -> the trainer's weight-dtype policy -> `methods.peft_config` (QLoRA:
`methods.build_model` on a saved copy, as `cheaptune train` loads it) -> `trainer.build_trainer` (trl
SFTTrainer subclass) -> `.train()`. Measured: torch's max allocated/reserved, nvidia-smi's used memory at
step ends, tokens/s after the first (warm-up) step, MFU by the throughput model's FLOP count.
A global deadline skips (and records) the cases that no longer fit in the time.

    python bench/gpu_validate.py --out $OUT/gpu_validate.json   # on the GPU machine (< 8 min)
    python bench/gpu_validate.py --cpu-smoke --out /tmp/x.json  # tiny configs on CPU (the test)
    python bench/gpu_validate.py --recalibrate bench/results/gpu_validate_<date>_H200.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_recalibrate import recalibrate  # noqa: E402

MODELS = ("Llama-3.1-8B", "Llama-2-7B", "Mistral-7B", "Qwen2.5-7B")
FIT_FRACTION = 0.95  # run a case only if its predicted device total is below this share of the GPU
SMOKE_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024}


@dataclass(frozen=True)
class Case:
    model: str
    method: str  # full | lora | qlora
    seq_len: int
    micro_batch: int
    grad_ckpt: bool
    options: tuple[str, ...] = ()  # speed options (OPTIONS) on top of plain trl

    @property
    def name(self) -> str:
        opts = "".join(f"+{o}" for o in self.options)
        return f"{self.model}/{self.method}/s{self.seq_len}/b{self.micro_batch}/{'ckpt' if self.grad_ckpt else 'nockpt'}{opts}"


# Speed options (cheaptune.train.speedups, attn: flash) as training-config fields.
OPTIONS = {"liger": {"liger_kernel": True}, "compile": {"torch_compile": True}, "flash": {"attn": "flash"},
           "paged8bit": {"optimizer": "paged_adamw_8bit"}}


def option_cases(with_qlora: bool) -> list[Case]:
    """Llama-3.1-8B LoRA (and QLoRA) at seq 2048 x 4 with checkpointing: plain trl, each option alone, all on."""
    sets = [(), *((o,) for o in OPTIONS), tuple(OPTIONS)]
    return [Case(MODELS[0], m, 2048, 4, True, s) for m in ("lora", "qlora") if m == "lora" or with_qlora for s in sets]


# the gpu_validate option names as estimate/data/speedups.yaml spells them
YAML_NAMES = {"liger": "liger_kernel", "compile": "torch_compile"}


def option_summary(rows: list[dict[str, Any]], gpu: Any = None) -> list[dict[str, Any]]:
    """Each option run against the same case without options: tokens/s and peak allocated memory ratios. On a
    known board, a single planner option also gets the `measured` entry speedups.yaml takes (its method class,
    vendor, arch, factor): a plan prices an option only where such an entry matches."""
    ok = {(r["method"], tuple(r["options"])): r["measured"] for r in rows if r.get("status") == "ok" and "options" in r}
    out = []
    for (method, opts), m in ok.items():
        base = ok.get((method, ()))
        if opts and base:
            out.append({"method": method, "options": list(opts),
                        "tokens_per_s_ratio": round(m["tokens_per_s"] / base["tokens_per_s"], 3),
                        "peak_allocated_ratio": round(m["max_allocated_bytes"] / base["max_allocated_bytes"], 3)})
            if gpu is not None and len(opts) == 1 and opts[0] in YAML_NAMES:
                from cheaptune.estimate.time.speedups import method_class

                out[-1]["speedups_yaml"] = {
                    "option": YAML_NAMES[opts[0]], "method_class": method_class(method), "vendor": gpu.vendor,
                    "arch": gpu.arch, "factor": out[-1]["tokens_per_s_ratio"],
                    "conditions": f"bench/gpu_validate.py, cheaptune train (HF Trainer/trl), {method} on {gpu.name}"}
    return out


def default_cases(models: list[str], with_qlora: bool) -> list[Case]:
    """Every combination for the first model, a diagonal for the others; grouped by model to reuse builds.

    Within a model: LoRA and full share one bf16 base; QLoRA comes last (it loads its own quantised copy).
    """
    out: list[Case] = []
    for i, m in enumerate(models):
        grid = [(s, b, c) for s in (512, 2048) for b in (1, 4) for c in (False, True)]
        diag = [(512, 1, False), (2048, 4, True)]
        for method in ("lora", "full", "qlora"):
            if method == "qlora" and not with_qlora:
                continue
            shapes = grid if i == 0 else diag
            if method == "qlora":
                shapes = [(s, b, True) for s in (512, 2048) for b in (1, 4)] if i == 0 else []
            out += [Case(m, method, s, b, c) for s, b, c in shapes]
    return out


def smoke_cases(with_qlora: bool) -> list[Case]:
    m = "Llama-3.1-8B"
    # the Liger case is refused on CPU and recorded as skipped with the one-line reason
    return [Case(m, "lora", 64, 1, False), Case(m, "full", 64, 2, True), Case(m, "lora", 64, 1, False, ("liger",))] + \
        ([Case(m, "qlora", 64, 1, True)] if with_qlora else [])


def model_config(name: str, smoke: bool) -> dict[str, Any]:
    from cheaptune.catalog.models import resolve_model

    cfg = dict(resolve_model(name).config)
    if smoke:
        cfg.update(SMOKE_SHAPE)
    return cfg


def estimator_precision(method: str, cuda: bool) -> str:
    """The precision both sides use: the shared policy's default for the method on a GPU (trainer and
    estimator read estimate/policy.py), fp32 for the CPU smoke run (the trainer's CPU default)."""
    from cheaptune.estimate.policy import DEFAULT_PRECISION

    return DEFAULT_PRECISION[method] if cuda else "fp32"


def predict_memory(case: Case, config: dict[str, Any], precision: str) -> dict[str, Any]:
    """`cheaptune estimate` for the case (runs in a worker process: cold estimates take seconds each)."""
    from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

    start = time.monotonic()
    try:
        est = estimate_memory(EstimateRequest(model=config, method=case.method, micro_batch=case.micro_batch,
                                              seq_len=case.seq_len, precision=precision, grad_ckpt=case.grad_ckpt))
    except Exception as err:  # a failed estimate is a result to record, not a reason to stop the run
        return {"error": f"{type(err).__name__}: {err}"}
    return {"peak_allocated_bytes": est.peak_allocated_bytes, "peak_reserved_bytes": est.peak_reserved_bytes,
            "device_total_bytes": est.device_total_bytes, "trainable_params": est.trainable_params,
            "basis": est.basis, "seconds": round(time.monotonic() - start, 2)}


def predict_throughput(case: Case, config: dict[str, Any], gpu: Any, trainable: int) -> dict[str, Any]:
    from cheaptune.catalog.models import count_params
    from cheaptune.estimate.time.throughput import Job, ModelShape, step_time

    shape = ModelShape.from_config(config, count_params(config))
    t = step_time(Job(shape, case.method, case.seq_len, case.micro_batch, case.grad_ckpt, trainable), gpu)
    return {"tokens_per_s": t.tokens_per_s, "mfu": t.mfu, "peak_tflops": t.peak_tflops,
            "flops_per_token": t.flops_per_token, "parts": t.parts,
            "step_overhead_s": sum(v for k, v in t.parts.items() if k != "compute")}  # what MFU leaves out


def nvidia_smi_used_mib() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def step_timer(cuda: bool):
    """A TrainerCallback that times each optimizer step (after a device sync) and samples nvidia-smi."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.smi: list[int] = []

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
                used = nvidia_smi_used_mib()
                if used is not None:
                    self.smi.append(used)
            self.ends.append(time.perf_counter())

    return StepTimer()


class Runner:
    """Builds each base model once and trains every case of it through the trainer's code path."""

    def __init__(self, smoke: bool, steps: int, work: Path) -> None:
        import torch

        from cheaptune.demo.tiny import train_tokenizer

        self.smoke, self.steps, self.work = smoke, steps, work
        self.cuda = torch.cuda.is_available() and not smoke
        self.tokenizer = train_tokenizer()
        self.base: Any = None
        self.base_key: tuple[str, str] | None = None

    def train_config(self, case: Case):
        from cheaptune.train.config import validate

        return validate({
            "base_model": str(self.work / "saved" / case.model), "method": case.method,
            "sequence_len": case.seq_len, "micro_batch_size": case.micro_batch, "max_steps": self.steps,
            "gradient_checkpointing": case.grad_ckpt, "lora_dropout": 0.0, "optimizer": "adamw_torch_fused"
            if self.cuda else "adamw_torch", "device": "cuda" if self.cuda else "cpu",
            "output_dir": str(self.work / "out"), "resume": "never", "logging_steps": 1, "datasets": [],
            **{k: v for o in case.options for k, v in OPTIONS[o].items()},
        })

    def base_model(self, case: Case, cfg: Any, prec: Any):
        """The random-weight base in the trainer's weight dtype, reused while the model and dtype stay."""
        import torch
        from transformers import AutoModelForCausalLM

        dtype = prec.policy(case.method).base_dtype
        key = (case.model, str(dtype))
        if self.base_key == key:
            return self.base
        if self.base is not None and self.base_key[0] == case.model:
            self.base = self.base.to(dtype)  # same weights, new dtype: cheaper than a new build
        else:
            self.drop_base()
            from cheaptune.catalog.models import resolve_model, to_hf_config

            hf = to_hf_config(resolve_model(case.model), **(SMOKE_SHAPE if self.smoke else {}))
            with torch.device("cuda" if self.cuda else "cpu"):
                self.base = AutoModelForCausalLM.from_config(hf, dtype=dtype)
        self.base_key = key
        return self.base

    def drop_base(self) -> None:
        self.base, self.base_key = None, None
        self.free()

    def free(self) -> None:
        import torch

        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def qlora_model(self, case: Case, cfg: Any, prec: Any):
        """QLoRA loads quantised from a folder (as `cheaptune train` does): save the bf16 base once."""
        from cheaptune.train.methods import build_model

        saved = self.work / "saved" / case.model
        if not (saved / "config.json").exists():
            lora = self.train_config(Case(case.model, "lora", case.seq_len, case.micro_batch, case.grad_ckpt))
            self.base_model(case, lora, prec).save_pretrained(saved, safe_serialization=True)
        self.drop_base()
        return build_model(cfg, prec)

    def run(self, case: Case, config: dict[str, Any]) -> dict[str, Any]:
        import peft
        import torch
        from datasets import Dataset

        from cheaptune.train import speedups
        from cheaptune.train.methods import attn_implementation, peft_config, resolve_precision
        from cheaptune.train.trainer import build_trainer

        cfg = self.train_config(case)
        prec = resolve_precision(cfg)
        speedups.check(cfg, prec.device)  # BadInput: the option cannot run here (recorded as skipped)
        attn = attn_implementation(cfg.attn, prec.device)
        if case.method == "qlora":
            model = self.qlora_model(case, cfg, prec)
        else:
            base = self.base_model(case, cfg, prec)
            base.set_attn_implementation(attn)
            pcfg = peft_config(cfg, base)
            base.requires_grad_(pcfg is None)
            model = base if pcfg is None else peft.get_peft_model(base, pcfg)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        g = torch.Generator().manual_seed(0)
        rows = self.steps * case.micro_batch
        ids = torch.randint(0, config["vocab_size"], (rows, case.seq_len), generator=g).tolist()
        timer = step_timer(self.cuda)
        self.free()
        trainer = build_trainer(cfg, prec, model, self.tokenizer, Dataset.from_dict({"input_ids": ids}), None,
                                "text", [timer])
        try:
            trainer.train()
            res = self.measure(case, timer, trainable)
        finally:
            del trainer
            self.restore(model, case)
        return {**res, "autocast": prec.name, "weights_dtype": str(next(model.parameters()).dtype),
                "estimator_precision": estimator_precision(case.method, self.cuda)}

    def measure(self, case: Case, timer: Any, trainable: int) -> dict[str, Any]:
        import torch

        tokens_per_step = case.micro_batch * case.seq_len
        steady = timer.ends[1:]
        step_s = (steady[-1] - steady[0]) / (len(steady) - 1) if len(steady) > 1 else None
        out: dict[str, Any] = {"steps": len(timer.ends), "trainable_params": trainable,
                               "step_seconds": step_s, "tokens_per_s": tokens_per_step / step_s if step_s else None}
        if self.cuda:
            out.update(max_allocated_bytes=torch.cuda.max_memory_allocated(),
                       max_reserved_bytes=torch.cuda.max_memory_reserved(),
                       nvidia_smi_used_mib=max(timer.smi) if timer.smi else None)
        else:
            import resource

            out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return out

    def restore(self, model: Any, case: Case) -> None:
        """Take the adapters off the shared base and undo checkpointing so the next case starts clean."""
        if case.method == "qlora":
            self.drop_base()
            return
        if case.method != "full":
            self.base = model.unload()
        for p in self.base.parameters():
            p.grad = None  # full fine-tuning leaves gradients on the shared base
        if hasattr(self.base, "gradient_checkpointing_disable"):
            self.base.gradient_checkpointing_disable()
        self.free()


def gpu_spec(cuda: bool):
    import torch

    from cheaptune.catalog.gpus import resolve_gpu

    name = torch.cuda.get_device_name(0) if cuda else "H200"
    try:
        return resolve_gpu(name)
    except Exception:  # an unlisted board: predictions relative to H200 are still recorded
        return resolve_gpu("H200")


def measured_board(gpu: Any) -> bool:
    """Is `gpu` the board this run measured (not gpu_spec's H200 stand-in for an unlisted one)?"""
    import torch

    from cheaptune.catalog.gpus import normalize_gpu_name

    return normalize_gpu_name(torch.cuda.get_device_name(0)) == gpu.name


def have_bitsandbytes() -> tuple[bool, str | None]:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as err:
        return False, f"bitsandbytes not importable ({err}); carry the wheel (bench/README.md)"
    return True, None


def machine(cuda: bool) -> dict[str, Any]:
    import torch
    import transformers

    out = {"cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "device": "cpu"}
    if cuda:
        p = torch.cuda.get_device_properties(0)
        out.update(device=p.name, device_total_bytes=p.total_memory, cuda=torch.version.cuda,
                   nvidia_smi_idle_used_mib=nvidia_smi_used_mib())
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="results JSON (default: $OUT/gpu_validate.json or ./gpu_validate.json)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny configs on CPU: checks the script, not the GPU")
    p.add_argument("--models", default=",".join(MODELS), help="comma list of catalog names")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per case (first is warm-up)")
    p.add_argument("--max-seconds", type=float, default=450.0, help="global deadline; later cases are skipped")
    p.add_argument("--options-only", action="store_true",
                   help="only the speed-option comparison (option_cases), not the estimator grid")
    p.add_argument("--workers", type=int, default=8, help="processes computing the estimates meanwhile")
    p.add_argument("--recalibrate", type=Path, metavar="FILE", help="print fitted constants from a results JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = parse(argv)
    if a.recalibrate:
        return recalibrate(a.recalibrate)
    t0 = time.monotonic()
    import multiprocessing as mp

    import torch

    cuda = torch.cuda.is_available() and not a.cpu_smoke
    bnb_ok, bnb_why = have_bitsandbytes()
    cases = smoke_cases(bnb_ok) if a.cpu_smoke else option_cases(bnb_ok) if a.options_only else \
        default_cases([m.strip() for m in a.models.split(",")], bnb_ok) + option_cases(bnb_ok)
    configs = {c.model: model_config(c.model, a.cpu_smoke) for c in cases}
    gpu = gpu_spec(cuda)
    device_total = torch.cuda.get_device_properties(0).total_memory if cuda else gpu.memory_bytes
    work = Path(tempfile.mkdtemp(prefix="gpu_validate_"))
    runner = Runner(a.cpu_smoke, a.steps, work)
    eprec = {c: estimator_precision(c.method, cuda) for c in cases}
    # Estimates run in other processes: they are slow cold, and the fake-tensor simulation must not share a
    # process with real training (seen: a later CPU QLoRA step failed with DataDependentOutputException).
    pool = ProcessPoolExecutor(1 if a.cpu_smoke else max(1, a.workers),
                               mp_context=mp.get_context("spawn"), initializer=sys.path.insert,
                               initargs=(0, str(Path(__file__).resolve().parent)))
    futures = {c: pool.submit(predict_memory, c, configs[c.model], eprec[c]) for c in cases}
    results: list[dict[str, Any]] = []
    if not bnb_ok:
        results.append({"case": "qlora (all)", "status": "skipped", "reason": bnb_why})
    doc = {"benchmark": "gpu_validate", "date": dt.date.today().isoformat(),
           "mode": "cpu-smoke" if a.cpu_smoke else "gpu", "gpu": gpu.name if cuda else None,
           "machine": machine(cuda), "steps_per_case": a.steps,
           "settings": {"optimizer": "adamw_torch_fused" if cuda else "adamw_torch", "lora_r": 16, "lora_alpha": 32,
                        "full_precision": "bf16-true (weights, grads and AdamW state in bf16)" if cuda else "fp32",
                        "lora_dropout": 0.0, "lora_targets": "all-linear", "data": "random token ids, rows of seq_len"},
           "seconds": 0.0, "cases": results}
    out = a.out or Path(os.environ.get("OUT", ".")) / "gpu_validate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spent: list[float] = []
    for c in cases:
        start = time.monotonic()
        expected = max(spent) * 1.2 if spent else 20.0
        if start - t0 + expected > a.max_seconds:
            results.append({"case": c.name, **asdict(c), "status": "skipped",
                            "reason": f"deadline ({a.max_seconds:.0f} s)"})
            continue
        pred = futures[c].result()
        results.append(run_case(c, pred, runner, configs[c.model], gpu, device_total if cuda else None))
        if results[-1]["status"] != "skipped":
            spent.append(time.monotonic() - start)
        doc["seconds"] = round(time.monotonic() - t0, 1)
        write(out, doc)  # after every case: a run killed at its time limit keeps what it measured
        print(f"[{doc['seconds']:6.1f}s] {c.name}: {results[-1]['status']} "
              f"{json.dumps(results[-1].get('measured', results[-1].get('reason', '')))[:200]}", flush=True)
    pool.shutdown(wait=False, cancel_futures=True)
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["options_vs_plain_trl"] = option_summary(results, gpu if cuda and measured_board(gpu) else None)
    write(out, doc)
    print(f"wrote {out} ({sum(r.get('status') == 'ok' for r in results)} cases ok) in {doc['seconds']} s")
    return doc


def run_case(c: Case, pred: dict[str, Any], runner: Runner, config: dict[str, Any], gpu: Any,
             device_total: int | None) -> dict[str, Any]:
    """One row: skip if predicted not to fit, else train and put the measurement beside the predictions."""
    import torch

    from cheaptune.errors import BadInput

    row: dict[str, Any] = {"case": c.name, **asdict(c), "predicted": pred}
    if device_total and "error" not in pred and pred["device_total_bytes"] > FIT_FRACTION * device_total:
        return {**row, "status": "skipped", "reason": "predicted not to fit"}
    try:
        row["measured"] = runner.run(c, config)
        row["status"] = "ok"
    except BadInput as err:  # an option this machine cannot run (no CUDA, package missing)
        return {**row, "status": "skipped", "reason": str(err)}
    except torch.cuda.OutOfMemoryError as err:
        row.update(status="oom", error=str(err).splitlines()[0])
        runner.drop_base()
    except Exception as err:  # one broken case must not lose the others' measurements
        row.update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
        runner.drop_base()
    m = row.get("measured", {})
    tp = predict_throughput(c, config, gpu, m.get("trainable_params") or pred.get("trainable_params", 0))
    row["predicted"] = {**pred, "throughput": tp}
    if m.get("step_seconds"):
        compute_s = max(m["step_seconds"] - tp["step_overhead_s"], 1e-9)
        m["mfu"] = c.micro_batch * c.seq_len * tp["flops_per_token"] / (tp["peak_tflops"] * 1e12 * compute_s)
    return row


def write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    main()
