"""`cheaptune doctor CONFIG`: the common cost mistakes, checked on a training config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cheaptune.cli.checks import path
from cheaptune.cli.vocab import Spot, spot_flag, spot_option

if TYPE_CHECKING:
    from cheaptune.train.config import TrainConfig


def doctor_command(
    config: Path = typer.Argument(..., parser=path, help="Training config YAML (Axolotl keys or HF aliases)."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU it will run on (enables memory and bf16 checks)."),
    spot: Spot = spot_option("from the config's spot_notice"),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
) -> None:
    """Check a training config against the guide's common mistakes; prints one line of advice per finding."""
    import dataclasses

    from cheaptune.plan.config_facts import facts_from_config, load_config
    from cheaptune.plan.doctor import run_checks

    cfg = load_config(config)
    for line in cfg.foreign_notes(str(config)):
        typer.echo(line, err=True)
    spec = None
    fit = None
    if gpu is not None:
        from cheaptune.catalog.gpus import resolve_gpu

        spec = resolve_gpu(gpu)
        if cfg.base_model and cfg.method in ("full", "qlora"):
            from cheaptune.catalog.models import resolve_model
            from cheaptune.plan.sources import real_fit

            fit = real_fit(resolve_model(cfg.base_model), cfg.sequence_len, 0.10, cfg.lora_r)
    findings = run_checks(dataclasses.replace(
        facts_from_config(cfg, spec, spot_flag(spot), fit),
        missing=tuple(k for k, have in (("base_model", cfg.base_model), ("datasets", cfg.datasets)) if not have),
        data_problems=_data_problems(cfg),
        rented=bool(cfg.price_per_hour) or cfg.spot_notice != "none",
        shuts_down=cfg.on_finish != "nothing" or bool(cfg.shutdown_command)))
    if as_json:
        from cheaptune.cli.output import emit_json

        emit_json({"config": str(config), "findings": [f.to_dict() for f in findings]})
        return
    if not findings:
        typer.echo(f"{config}: no findings")
    for f in findings:
        typer.echo(f"{f.severity}: [{f.code}] {f.message}")


def _data_problems(cfg: TrainConfig) -> tuple[str, ...]:
    """Why train would not read each dataset the config names: the same lazy check train makes (reads nothing)."""
    from cheaptune.data.readers import iter_rows
    from cheaptune.errors import BadInput

    out = []
    for d in cfg.datasets:
        try:
            iter_rows(d.path)
        except BadInput as err:
            out.append(str(err))
    return tuple(out)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
