"""`cheaptune eval` as a library call: resolve the run -> load data and model -> score base and tuned ->
markdown report (atomic) and, for a registry run, an 'eval' event that `compare` and model cards read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cheaptune.util import atomic

HEADLINE = ("accuracy", "schema_valid", "json_valid", "exact_match")  # the first one present is the quality


def headline(side: dict[str, Any]) -> tuple[str, float] | None:
    """The score `compare` puts beside the cost: accuracy, else JSON schema validity, ..., else None."""
    return next(((k, side[k]) for k in HEADLINE if k in side), None)


def evaluate(ref: str, data: str | None = None, *, dataset: Any = None, base: str | None = None,
             limit: int | None = None, batch_size: int = 8, max_new_tokens: int | None = None,
             report: str | Path | None = None, progress: bool = True, tasks: list[str] | None = None,
             tasks_dir: str | None = None, skip_bad_rows: bool = False) -> dict[str, Any]:
    """Scores of the adapter `ref` (run or folder) against its base on `data` (a file) or `dataset`, and
    on lm-evaluation-harness `tasks` when given."""
    from cheaptune.errors import BadInput
    from cheaptune.export.source import resolve_source

    if limit is not None and limit < 1:
        raise BadInput(f"--limit must be >= 1 (got {limit})")
    if dataset is None and not data and not tasks:
        raise BadInput("nothing to evaluate on: pass --data FILE (held-out rows in a training format) or --tasks")
    src = resolve_source(ref, base)
    result: dict[str, Any] = {"rows": 0}
    if dataset is not None or data:
        result = _score_rows(src, data, dataset, limit, batch_size, max_new_tokens, progress, skip_bad_rows)
    if tasks:
        from cheaptune.evaluate.harness import run_tasks

        result["tasks"] = run_tasks(src, tasks, tasks_dir, limit, batch_size)
    result.update(data=str(data) if data else "validation split" if dataset is not None else None,
                  base_model=src.base, adapter=str(src.adapter_dir), run_id=(src.run or {}).get("id"))
    path = Path(report) if report else src.adapter_dir / "eval_report.md"
    atomic.write_text(path, markdown(result))
    result["report"] = str(path)
    if src.run is not None:
        record(src.run["id"], result)
    return result


def _score_rows(src: Any, data: str | None, dataset: Any, limit: int | None, batch_size: int,
                max_new_tokens: int | None, progress: bool, skip_bad_rows: bool = False) -> dict[str, Any]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cheaptune.errors import BadInput
    from cheaptune.evaluate.runner import compare, examples

    if dataset is None:
        from cheaptune.data import load_dataset_rows

        dataset = load_dataset_rows(data, skip_bad_rows=skip_bad_rows).dataset
    tokenizer = AutoTokenizer.from_pretrained(str(src.adapter_dir))
    exs = examples(dataset, tokenizer, limit)
    if not exs:
        raise BadInput(f"{data or 'the dataset'} has no rows to evaluate")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(src.base_dir), dtype="auto", use_safetensors=True).to(device)
    model = PeftModel.from_pretrained(model, str(src.adapter_dir))
    result = compare(model, tokenizer, exs, batch_size, max_new_tokens, progress)
    for side in ("base", "tuned"):
        result[side].pop("answers", None)
    return result


def after_training(out_dir: Path, data: str | None, dataset: Any, run_id: str | None) -> dict[str, Any]:
    """`eval_after: true`: the saved adapter scored on `data` (a file) or the validation split; the scores
    go to the run's record and are returned for the training summary."""
    result = evaluate(str(out_dir), data, dataset=None if data else dataset, progress=False)
    if run_id is not None:
        record(run_id, result)
    return _event(result)


def _event(result: dict[str, Any]) -> dict[str, Any]:
    keep = ("loss", "perplexity", "exact_match", "accuracy", "json_valid", "schema_valid")
    out = {"data": result["data"], "rows": result["rows"],
           **{side: {k: result[side][k] for k in keep if k in result[side]} for side in ("base", "tuned")
              if side in result}}
    if "tasks" in result:
        out["tasks"] = result["tasks"]
    return out


def record(run_id: str, result: dict[str, Any]) -> None:
    """The scores as an 'eval' event of the run (events need no segment; the run's status is untouched)."""
    from cheaptune.runs.registry import Registry, RunHandle

    RunHandle(Registry(), run_id, segment=-1).event("eval", _event(result))


PROMPT_CHARS = 200  # the end of a prompt (the question) is what a reader of the report needs


def tail(text: str, limit: int) -> str:
    """The last `limit` characters or fewer, starting at a word: '...' and whole words, never half of one."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    start = next((i + 1 for i, ch in enumerate(cut) if ch.isspace()), 0)
    return "..." + cut[start:]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(result: dict[str, Any]) -> str:
    """A small report: base vs tuned per metric, the confusion table for labels, three examples."""
    lines = [f"# Evaluation: {result.get('adapter', '')}", "", f"Base model: {result.get('base_model', '')}; "
             f"data: {result.get('data') or '-'} ({result['rows']} rows)", ""]
    for task, sides in result.get("tasks", {}).items():
        lines += [f"lm-eval task {task}:", "", "| metric | base | tuned |", "|---|---|---|"]
        lines += [f"| {m} | {v:.4g} | {sides.get('tuned', {}).get(m, float('nan')):.4g} |"
                  for m, v in sides.get("base", {}).items()]
        lines.append("")
    if "tuned" not in result:
        return "\n".join(lines)
    b, t = result["base"], result["tuned"]
    lines += ["| metric | base | tuned | change |", "|---|---|---|---|"]
    for key in ("loss", "perplexity"):
        lines.append(f"| {key} | {b[key]:.4g} | {t[key]:.4g} | {t[key] - b[key]:+.4g} |")
    for key in ("exact_match", "accuracy", "json_valid", "schema_valid"):
        if key in t:
            lines.append(f"| {key} | {_pct(b.get(key))} | {_pct(t[key])} | {100 * (t[key] - b.get(key, 0)):+.1f} pts |")
    if "confusion" in t:
        labels = t["labels"]
        cols = [*labels, "(other)"]
        lines += ["", "Confusion (tuned; rows: reference, columns: answer)", "",
                  "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        lines += [f"| {r} | " + " | ".join(str(t["confusion"][r].get(c, 0)) for c in cols) + " |" for r in labels]
    for ex in result.get("examples", []):
        lines += ["", f"- prompt: `{tail(ex['prompt'], PROMPT_CHARS)!r}`", f"  - reference: `{ex['reference']!r}`",
                  f"  - base: `{ex['base']!r}`", f"  - tuned: `{ex['tuned']!r}`"]
    return "\n".join(lines) + "\n"
