"""`cheaptune export RUN --to merged|ollama|vllm|hub|gguf`: a run's adapter, ready where models are served."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import path
from cheaptune.cli.vocab import force_option, json_option


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)


def export_cmd(
    run: str = typer.Argument(..., help="Run id, prefix or name, or a folder with a saved adapter."),
    to: str = typer.Option(..., "--to", help="merged | ollama | vllm | hub | gguf"),
    out: Path = typer.Option(None, "--out", "-o", parser=path, help="Export folder (default: RUN_OUTPUT/export/KIND)."),
    base: str = typer.Option(None, "--base", help="Base model folder or hub id (default: the adapter's)."),
    repo: str = typer.Option(None, "--repo", help="With --to hub: OWNER/NAME."),
    public: bool = typer.Option(False, "--public", help="With --to hub: a public repo (default private)."),
    merged: bool = typer.Option(False, "--merged", help="With --to hub: push merged weights, not the adapter."),
    force: bool = force_option("Replace an existing export."),
    json_out: bool = json_option(),
) -> None:
    """Export a trained adapter: merged 16-bit weights (shard by shard, low RAM), an Ollama Modelfile, a
    vLLM command, a hub repo with a model card, or GGUF through llama.cpp's converter."""
    from cheaptune.export.run import export

    result = export(run, to, out, force=force, base=base, repo=repo, private=not public, merged=merged)
    if json_out:
        from cheaptune.cli.output import emit_json

        emit_json(result)
        return
    typer.echo(f"{result.kind} export in {result.path} ({result.verified})")
    for key, value in result.details.items():
        typer.echo(f"  {key}: {value}")
