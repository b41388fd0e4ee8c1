"""The plan table at 80, 120 and 200 columns: no cut header or cell, the deciding columns always shown,
the rest at 200 or with --wide (hand-made catalogs, fake fit: no simulation)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from cheaptune.plan import render
from cheaptune.plan.planner import make_plan
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

EXTRA = [h for h in render.HEADERS if h not in render.CORE]


def _shown(width: int, wide: bool = False) -> tuple[str, object]:
    r = make_plan("test-7b", SHAPE_7B, 4096, Workload(tokens=20_000_000, epochs=2), Constraints(), GPUS, OFFERS,
                  fake_fit())
    out = io.StringIO()
    render.print_rich(r, Console(file=out, width=width, force_terminal=True, color_system=None), wide=wide)
    return out.getvalue(), r


def _totals(r) -> list[str]:
    return [f"{o.cost['total']:.2f}" for o in r.options[: r.constraints.top]]


@pytest.mark.parametrize("width", [80, 120, 200])
def test_every_option_s_deciding_figures_are_whole_at_any_width(width):
    text, r = _shown(width)
    assert "…" not in text  # rich's mark for a cut cell or header
    table_lines = [line for line in text.splitlines() if line.startswith(("┃", "│", "┏", "┡", "└", "1.", "   $"))]
    assert table_lines and all(len(line) <= width for line in table_lines)
    for total in _totals(r):
        assert total in text
    for o in r.options[: r.constraints.top]:
        assert o.hardware() in text and o.method in text


def test_80_columns_stack_120_show_the_deciding_columns_200_show_all():
    narrow, r = _shown(80)
    blocks = [line for line in narrow.splitlines() if re.match(r"\d+\. ", line)]
    assert len(blocks) == len(_totals(r)) and "┃" not in narrow and "--wide" in narrow
    middle, _ = _shown(120)
    assert all(h in middle for h in render.CORE) and not any(h in middle for h in ("$ compute", "mb/accum/ckpt"))
    assert "--wide" in middle
    full, _ = _shown(200)
    assert all(h in full for h in render.HEADERS) and "--wide" not in full


def test_wide_shows_every_column_on_a_narrow_terminal():
    text, _ = _shown(80, wide=True)
    assert all(h in text for h in EXTRA) and "…" not in text
