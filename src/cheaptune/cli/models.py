"""`cheaptune models`: the model catalog (id, family, parameters, context length) as a table or JSON."""

from __future__ import annotations

import typer


def _human(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models(
        family: str = typer.Option(None, "--family", help="Only this family, e.g. llama-3.1, qwen2.5, gemma-2."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the bundled model catalog; any other model works as a local config.json or model dir."""
        from cheaptune.catalog.models import list_models
        from cheaptune.cli.output import console, emit_json
        from cheaptune.errors import BadInput
        from cheaptune.util.names import did_you_mean

        specs = list_models(family=family)
        if not specs:
            families = sorted({s.family for s in list_models()})
            raise BadInput(f"--family {family!r}: no such family{did_you_mean(family, families)}")
        rows = [{"id": s.id, "family": s.family, "aliases": list(s.aliases), "params": s.params,
                 "context_length": s.context_length, "model_type": s.config["model_type"],
                 "source": s.source, "checked": s.checked} for s in specs]
        if as_json:
            emit_json(rows)
            return
        from cheaptune.cli.output import fitted_table, left_out

        cells = [[r["id"], r["family"], _human(r["params"]), f"{r['context_length']:,}",
                  r["aliases"][0] if r["aliases"] else ""] for r in rows]
        out = console()
        # every cell whole: on a narrow terminal the family, then the short name, go whole and are named
        table, dropped = fitted_table(out, ("id", "family", "parameters", "context", "short name"), cells,
                                      ("family", "short name"), right=("parameters", "context"))
        out.print(table)
        if dropped:
            out.print(left_out(dropped), soft_wrap=True)
