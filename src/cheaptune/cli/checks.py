"""Number checks at the CLI boundary: finite and in range, with the range in the message.

click's own ranges let NaN through (every comparison with NaN is false) and say nothing of infinity,
so `--epochs nan` or `--epochs 1e308` reached the planner; a callback from `bounded` stops them at
the flag, as one BadInput line naming the flag, the allowed range and the value given.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
