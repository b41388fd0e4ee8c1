"""`cheaptune gpus`: the GPU catalog (memory, dense peaks, bandwidth) as a table or JSON."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("gpus")
    def gpus(
        tier: str = typer.Option(None, "--tier", help="Only this tier: consumer, professional or datacenter."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the GPUs cheaptune knows, with the specs its estimates use (dense peaks, no sparsity)."""
        from cheaptune.catalog.gpus import list_gpus
        from cheaptune.cli.output import console, emit_json
        from cheaptune.errors import BadInput

        tiers = ("consumer", "professional", "datacenter")
        if tier is not None and tier not in tiers:
            raise BadInput(f"--tier {tier!r}: expected one of {', '.join(tiers)}")
        specs = [g for g in list_gpus() if tier is None or g.tier == tier]
        if as_json:
            emit_json([g.model_dump(mode="json") | {"memory_bytes": g.memory_bytes} for g in specs])
            return
        from rich.table import Table

        table = Table(title="dense tensor peaks; without bf16 the fp16 peak is shown")
        for col in ("GPU", "GiB", "arch", "TFLOPS", "GB/s", "tier", "notes"):
            table.add_column(col, no_wrap=col in ("GPU", "tier"))
        for g in specs:
            notes = ", ".join(n for n, on in (("no CUDA", not g.cuda), ("no 4-bit bnb", not g.bnb_4bit),
                                              ("fp16 only", not g.bf16),
                                              (f"assumed: {' '.join(g.assumed)}", bool(g.assumed))) if on)
            table.add_row(g.name, f"{g.memory_gib:.0f}", g.arch, f"{g.peak_tflops('bf16'):g}",
                          f"{g.mem_bw_gbs:g}", g.tier, notes)
        console().print(table)
