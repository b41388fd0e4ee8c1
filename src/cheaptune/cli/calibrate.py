"""`cheaptune calibrate`: fit per-(GPU, method) memory and speed factors from the run registry."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import path


def _table(factors, title: str) -> None:
    from rich.table import Table

    from cheaptune.cli.output import console

    table = Table("GPU", "method", "memory x", "speed x", "runs", "speed spread (log sd)", "updated", title=title)
    for f in factors:
        table.add_row(f.gpu, f.method, "-" if f.memory is None else f"{f.memory:.3f}",
                      "-" if f.speed is None else f"{f.speed:.3f}", str(f.runs),
                      "-" if f.speed_log_sd is None else f"{f.speed_log_sd:.3f}", f.updated)
    console().print(table)


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate(
        show: bool = typer.Option(False, "--show", help="List the stored factors; fit nothing."),
        export: Path = typer.Option(None, "--export", parser=path, help="Write the stored factors to this CSV."),
        import_: Path = typer.Option(None, "--import", parser=path, help="Pool the factors of this CSV into the stored ones."),
        as_json: bool = typer.Option(False, "--json", help="Print the factors as JSON."),
    ) -> None:
        """Fit memory and speed correction factors per GPU and method from finished runs (their probe and
        full-run measurements against the plan); `estimate` and `plan` apply them unless --no-calibration."""
        import dataclasses

        from cheaptune.errors import BadInput
        from cheaptune.runs import calibration as cal
        from cheaptune.util import atomic
        from cheaptune.util.files import read_text

        if sum((show, export is not None, import_ is not None)) > 1:
            raise BadInput("give one of --show, --export FILE, --import FILE (or none, to fit from the registry)")
        stored = cal.load()
        if export is not None:
            atomic.write_text(export, cal.to_csv(stored.values()))
            typer.echo(f"wrote {len(stored)} factors to {export}")
            return
        if import_ is not None:
            incoming = cal.from_csv(read_text(import_, "calibration CSV"), str(import_))
            for f in incoming:
                key = (f.gpu, f.method)
                stored[key] = cal.pool(stored[key], f) if key in stored else f
            factors = sorted(stored.values(), key=lambda f: (f.gpu, f.method))
            typer.echo(f"pooled {len(incoming)} factors from {import_} into {cal.save(factors)}")
        elif show:
            factors = sorted(stored.values(), key=lambda f: (f.gpu, f.method))
        else:
            from cheaptune.runs.registry import Registry

            found = cal.samples(Registry())
            if not found:
                raise BadInput("no finished run with a probe on a GPU in the registry yet: train on a GPU from a "
                               "plan (`cheaptune train --plan plan.yaml`), then calibrate")
            factors = cal.fit(found)
            typer.echo(f"fitted {len(factors)} factors from {len(found)} runs into {cal.save(factors)}")
        if as_json:
            from cheaptune.cli.output import emit_json

            emit_json([dataclasses.asdict(f) for f in factors])
        elif factors:
            _table(factors, "calibration: measured / predicted")
        else:
            typer.echo("no calibration stored: run `cheaptune calibrate` after some runs")
