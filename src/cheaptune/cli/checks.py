"""Number checks at the CLI boundary: finite and in range, with the range in the message.

click's own ranges let NaN through (every comparison with NaN is false) and say nothing of infinity,
so `--epochs nan` or `--epochs 1e308` reached the planner; a callback from `bounded` stops them at
the flag, as one BadInput line naming the flag, the allowed range and the value given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import typer

from cheaptune.errors import BadInput

Number = int | float


def bounded(lo: Number, hi: Number, *, above: bool = False) -> Callable[[typer.CallbackParam, Number | None], Number | None]:
    """A typer callback accepting None (flag not given) or a finite value in [lo, hi] ((lo, hi] with `above`)."""

    def check(param: typer.CallbackParam, value: Number | None) -> Number | None:
        if value is None:
            return value
        outside = value <= lo if above else value < lo
        if not math.isfinite(value) or outside or value > hi:
            flag = max(param.opts, key=len) if param.opts else str(param.name)
            raise BadInput(f"{flag} must be {describe(lo, hi, above=above, whole=isinstance(value, int))} "
                           f"(got {value!r})")
        return value

    return check


def describe(lo: Number, hi: Number, *, above: bool = False, whole: bool = False) -> str:
    """'a whole number from 1 to 4096' / 'a number above 0 and at most 1000'."""
    kind = "a whole number" if whole else "a number"
    if above:
        return f"{kind} above {_n(lo)} and at most {_n(hi)}"
    return f"{kind} from {_n(lo)} to {_n(hi)}"


def _n(x: Number) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def nonempty(param: typer.CallbackParam, value: str | list[str] | None) -> str | list[str] | None:
    """A typer callback refusing a text flag given as '' or spaces, once or among repeats: read as 'not given' it
    was ignored (`launch --gpu ''` kept the plan's GPU with exit 0; `train --model ''` said no base model,
    `estimate --model ''` read the current folder, `train --data ''` a dataset folder here)."""
    items = value if isinstance(value, list) else [value]
    if any(v is not None and not v.strip() for v in items):
        flag = max(param.opts, key=len) if param.opts else str(param.name)
        raise BadInput(f"{flag} is empty; give a value or leave the flag out")
    return value


def path(value: str) -> Path:
    """A typer parser for path flags that refuses '' (or spaces): pathlib reads '' as '.', so `--save ''` said '. is
    a folder' and `--data ''` looked for a dataset in the current folder. click names the flag in its line."""
    if not value.strip():
        raise typer.BadParameter("is empty; give a path, or leave it out where it is optional")
    return Path(value)


def typed(ctx: typer.Context, *names: str) -> list[str]:
    """The flags among parameters `names` the user typed (click's ParameterSource.COMMANDLINE), so a flag
    that only means something beside another can be refused when given alone, even at its default value
    (`--generations 8` without `--objective grpo` changes nothing)."""
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            param = next(p for p in ctx.command.params if p.name == name)
            off = getattr(param, "secondary_opts", None) and ctx.params.get(name) is False  # --no-speedups
            out.append(max(param.secondary_opts if off else param.opts, key=len))
    return out


def refuse_alone(ctx: typer.Context, names: tuple[str, ...], needed: bool, need: str, why: str) -> None:
    """One BadInput line when a flag of `names` was typed while what it goes with is absent (`needed` false):
    '--nodes needs --gpu: WHY', WHY saying how to fix it."""
    given = typed(ctx, *names)
    if given and not needed:
        raise BadInput(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} {need}: {why}")
