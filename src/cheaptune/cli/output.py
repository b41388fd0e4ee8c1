"""Printing helpers shared by commands: JSON to stdout, tables through rich, a status line on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def emit_json(obj: Any) -> None:
    """One JSON document on stdout (dataclasses and pydantic models are converted first)."""
    print(json.dumps(to_jsonable(obj), indent=2, sort_keys=False, default=str))


def to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def progress_wanted(progress: bool, as_json: bool) -> bool:
    """--progress forces the status line; otherwise only for a person: stderr a terminal and no --json."""
    return progress or (not as_json and sys.stderr.isatty())


@contextmanager
def status(enabled: bool, first: str = "working") -> Iterator[Callable[[str], None]]:
    """A spinner with a line of text on stderr while slow work runs; yields `say(text)` to change the text.

    Disabled, `say` does nothing, so the work reads the same either way; on a stderr that is not a
    terminal (--progress into a log) each new text is one plain line."""
    if not enabled:
        yield lambda _text: None
        return
    if not sys.stderr.isatty():
        said: list[str] = []

        def line(text: str) -> None:
            if not said or said[-1] != text:
                said.append(text)
                print(text, file=sys.stderr, flush=True)

        line(first)
        yield line
        return
    from rich.console import Console

    with Console(stderr=True).status(first) as shown:
        yield lambda text: shown.update(text)


def fitted_table(out: Any, headers: tuple[str, ...], rows: list[list[str]], drop: tuple[str, ...],
                 right: tuple[str, ...] = (), title: str | None = None) -> tuple[Any, list[str]]:
    """(table, columns left out): the first column (an id) is never cut; the columns named in `drop` go,
    in that order, until the rest fits `out`'s width whole. Columns in `right` (and those starting with
    $, steps or eval) are right-aligned."""
    from rich.measure import Measurement
    from rich.table import Table

    cols, dropped = list(headers), []
    while True:
        table = Table(title=title)
        for n, c in enumerate(cols):
            table.add_column(c, no_wrap=True, min_width=max((len(r[0]) for r in rows), default=2) if n == 0 else None,
                             justify="right" if c in right or c.startswith(("$", "steps", "eval")) else "left")
        keep = [headers.index(c) for c in cols]
        for r in rows:
            table.add_row(*(r[i] for i in keep))
        left = [c for c in drop if c in cols]
        if not left or Measurement.get(out, out.options.update_width(10**5), table).maximum <= out.width:
            return table, dropped
        cols.remove(left[0])
        dropped.append(left[0])


def left_out(dropped: list[str], how: str = "--json, or a wider terminal, shows them") -> str:
    """The line under a table that lost columns to the terminal's width ('' when none did)."""
    return f"columns left out at this width: {', '.join(dropped)} ({how})" if dropped else ""


def console():
    """A rich Console (imported lazily: rich costs ~50 ms)."""
    from rich.console import Console

    return Console()
