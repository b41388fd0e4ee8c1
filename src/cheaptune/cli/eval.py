"""`cheaptune eval RUN_OR_ADAPTER --data FILE`: the tuned model against its base on held-out rows."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import nonempty, path


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)


def eval_cmd(
    run: str = typer.Argument(..., help="Run id, prefix or name, or a folder with a saved adapter."),
    data: str = typer.Option(None, "--data", callback=nonempty, help="Held-out rows (messages, prompt/completion, alpaca, text...)."),
    tasks: str = typer.Option(None, "--tasks", help="lm-evaluation-harness tasks, comma-separated (the harness extra)."),
    tasks_dir: str = typer.Option(None, "--tasks-dir", help="Folder of your own lm-eval task YAMLs (instead of the built-in ones)."),
    base: str = typer.Option(None, "--base", help="Base model folder or hub id (default: the adapter's)."),
    limit: int = typer.Option(None, "--limit", help="Score only the first N rows."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows", help="Skip and count bad rows of --data."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Rows per forward/generate batch."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", min=1, help="Answer length (default: longest reference + 8)."),
    report: Path = typer.Option(None, "--report", parser=path, help="Markdown report path (default: ADAPTER/eval_report.md)."),
    json_out: bool = typer.Option(False, "--json", help="Print the scores as JSON."),
) -> None:
    """Loss/perplexity and generated answers (exact match; accuracy + confusion for labels; JSON validity),
    base against tuned; a run's scores are kept in the registry for `cheaptune compare`."""
    from cheaptune.evaluate.run import evaluate, headline

    result = evaluate(run, data, base=base, limit=limit, batch_size=batch_size, max_new_tokens=max_new_tokens,
                      report=report, progress=not json_out, skip_bad_rows=skip_bad_rows,
                      tasks=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None, tasks_dir=tasks_dir)
    if json_out:
        from cheaptune.cli.output import emit_json

        emit_json(result)
        return
    for task, sides in result.get("tasks", {}).items():
        scores = ", ".join(f"{m} {v:.4g} -> {sides.get('tuned', {}).get(m, float('nan')):.4g}"
                           for m, v in sides.get("base", {}).items())
        typer.echo(f"{task}: {scores}")
    if "tuned" not in result:
        typer.echo(f"report: {result['report']}")
        return
    b, t = result["base"], result["tuned"]
    typer.echo(f"{result['rows']} rows: loss {b['loss']:.4f} -> {t['loss']:.4f}, perplexity {b['perplexity']:.4g} "
               f"-> {t['perplexity']:.4g}")
    top = headline(t)
    if top:
        typer.echo(f"{top[0]}: {100 * b[top[0]]:.1f}% -> {100 * top[1]:.1f}%")
    typer.echo(f"report: {result['report']}")
