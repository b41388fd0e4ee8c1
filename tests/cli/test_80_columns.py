"""Every command's help and the catalog tables at 80 columns (issue 33): nothing cut, option names whole,
one usage style, exit codes at the bottom, and a piped plan sized by COLUMNS."""

from __future__ import annotations

import io

import pytest
import typer
from rich.console import Console

from cheaptune.cli.main import build_app

WIDTH = 80
TABLE = ("┏", "┃", "┡", "│", "└")


def _commands() -> list[tuple[list[str], object]]:
    root = typer.main.get_command(build_app())
    out: list[tuple[list[str], object]] = [([], root)]
    for name, cmd in root.commands.items():
        out.append(([name], cmd))
        out += [([name, sub], c) for sub, c in getattr(cmd, "commands", {}).items()]
    return out


@pytest.fixture
def narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("LINES", "50")


@pytest.mark.parametrize("path", [" ".join(p) or "(root)" for p, _ in _commands()])
def test_help_at_80_columns_cuts_nothing_and_reads_the_same_everywhere(run_cli, narrow, path):
    words = [] if path == "(root)" else path.split()
    cmd = dict((" ".join(p) or "(root)", c) for p, c in _commands())[path]
    code, out, err = run_cli(*words, "--help")
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), [line for line in lines if len(line) > WIDTH]
    assert "…" not in out and "<str>" not in out and "<path>" not in out
    usage = out.split("\n\n")[0]
    assert usage.startswith("Usage: cheaptune") and "{" not in usage  # CONFIG / [CONFIG], never {config}
    for p in cmd.params:
        for name in (*p.opts, *p.secondary_opts):
            if name.startswith("-"):
                assert name in out, f"{path}: option {name} missing or cut"
    assert "Exit codes" in out
    last_section = max(out.find("Options:"), out.find("Commands:"), out.find("Arguments:"))
    assert out.rfind("Exit codes") > last_section  # at the bottom, as in every command


@pytest.mark.parametrize("args", [("prices",), ("prices", "--group-by-gpu"), ("models",), ("gpus",)])
def test_catalog_tables_fit_80_columns_whole(run_cli, narrow, args):
    code, out, err = run_cli(*args)
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith(TABLE)]
    assert table and all(len(line) <= WIDTH for line in table)
    assert all(line.rstrip()[-1] in "┓┃┩│┘" for line in table), table[0]  # no column cropped at the edge
    assert "…" not in out  # a cut cell or header
    if any("columns left out" in line for line in out.splitlines()):
        assert "--json" in out


def test_prices_table_keeps_every_cell_whole_and_names_what_it_left_out(run_cli, narrow):
    import json

    code, out, _ = run_cli("prices", "--limit", "30")
    doc = json.loads(run_cli("prices", "--limit", "30", "--json")[1])
    for o in doc["offers"]:
        assert o["provider"] in out and o["gpu"] in out
    assert "columns left out at this width: instance" in out


def test_piped_plan_honours_columns(monkeypatch):
    from cheaptune.plan import render
    from cheaptune.plan.planner import make_plan
    from cheaptune.plan.workload import Constraints, Workload
    from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

    r = make_plan("test-7b", SHAPE_7B, 4096, Workload(tokens=20_000_000), Constraints(), GPUS, OFFERS, fake_fit())

    def shown() -> list[str]:
        buf = io.StringIO()  # not a terminal, as `cheaptune plan ... | less`
        render.print_rich(r, Console(file=buf, color_system=None), wide=False)
        return [line for line in buf.getvalue().splitlines() if line.startswith(TABLE)]

    monkeypatch.setenv("COLUMNS", "80")
    assert all(len(line) <= 80 for line in shown())
    monkeypatch.delenv("COLUMNS")
    assert max(len(line) for line in shown()) > 80  # no COLUMNS: a pipe gets every column
