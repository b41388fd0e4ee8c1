"""One meaning per flag: every command's options against the README's vocabulary table, the old
spellings rewritten with a note, and help a person can read (workflow order, exit codes, no `<bool>`)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import typer

from cheaptune import __version__
from cheaptune.cli.main import build_app
from cheaptune.cli.vocab import RENAMED, WORKFLOW, modernize

README = Path(__file__).resolve().parents[2] / "README.md"


def _table() -> list[dict]:
    """The rows of the README's `### One vocabulary` table: flag, commands, replaced spellings."""
    text = README.read_text().split("### One vocabulary", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`--"):
            rows.append({"flag": cells[0].strip("`").split()[0], "commands": cells[2],
                         "replaces": re.findall(r"`([^`]+)`", cells[3])})
    return rows


@functools.cache
def _options() -> dict[str, set[str]]:
    """Every command (and subcommand) with the option names it accepts."""
    root = typer.main.get_command(build_app())
    out = {}
    for name, cmd in root.commands.items():
        for sub, c in [(name, cmd), *((f"{name} {s}", c) for s, c in getattr(cmd, "commands", {}).items())]:
            out[sub] = {o for p in c.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
    return out


def test_every_command_uses_the_table_s_flags_and_only_them():
    rows, options = _table(), _options()
    assert {r["flag"] for r in rows} >= {"--gpu", "--gpu-count", "--data", "--spot", "--disk-gib", "--skip-bad-rows"}
    for row in rows:
        if row["flag"] == "--json":
            continue
        listed = {c.strip() for c in row["commands"].split(",")}
        having = {name for name, opts in options.items() if row["flag"] in opts}
        assert having == listed, f"{row['flag']}: table says {sorted(listed)}, the CLI has it in {sorted(having)}"


def test_old_spellings_are_in_the_table_and_gone_from_the_commands():
    replaced = {spelling for row in _table() for spelling in row["replaces"]}
    options = _options()
    for command, renames in RENAMED.items():
        for old, new in renames.items():
            assert f"{command} {old}" in replaced, f"README table does not say {new} replaces `{command} {old}`"
            assert old not in options[command] and new in options[command]
    for name, opts in options.items():
        assert not {o for o in opts if o.endswith("-gb") or o in ("--on-demand", "--dataset")}, name


def test_modernize_rewrites_old_spellings_with_one_note_each(capsys):
    assert modernize("plan", ["m", "--gpus", "T4,A10G", "--json"]) == ["m", "--gpu", "T4,A10G", "--json"]
    assert modernize("train", ["--gpus=2"]) == ["--gpu-count=2"]
    assert modernize("launch", ["p.yaml", "--spot", "--disk-gb", "100"]) == ["p.yaml", "--spot", "only", "--disk-gib", "100"]
    assert modernize("doctor", ["--on-demand", "c.yaml"]) == ["--spot", "never", "c.yaml"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all("deprecated" in line for line in err)
    assert "use --gpu" in err[0] and "use --spot only" in err[2]
    # new spellings, other commands' flags and anything after `--` pass untouched and silently
    assert modernize("launch", ["--spot", "never", "--", "--gpus"]) == ["--spot", "never", "--", "--gpus"]
    assert modernize("runs", ["--gpus", "x"]) == ["--gpus", "x"]
    assert capsys.readouterr().err == ""


def test_an_old_spelling_still_works_end_to_end(run_cli):
    code, out, err = run_cli("prices", "--gpu", "A100-80GB", "--on-demand", "--json")
    assert code == 0 and "--spot never" in err and len(err.strip().splitlines()) == 1
    offers = json.loads(out)["offers"]
    assert offers and all(o["kind"] != "spot" for o in offers)
    code, out, _ = run_cli("prices", "--gpu", "A100-80GB", "--spot", "only", "--json")
    assert code == 0 and {o["kind"] for o in json.loads(out)["offers"]} == {"spot"}
    code, out, _ = run_cli("prices", "--gpu", "T4,A100-80GB", "--gpu", "h100", "--json")
    assert code == 0 and {o["gpu"] for o in json.loads(out)["offers"]} == {"T4", "A100-80GB", "H100"}
    code, _, err = run_cli("prices", "--spot", "sometimes")
    assert code == 2 and "auto" in err


def test_root_help_starts_with_the_workflow(run_cli):
    code, out, _ = run_cli("-h")
    assert code == 0 and "Start here" in out and "cheaptune plan" in out
    listed = [name for name in WORKFLOW if re.search(rf"^  {name}\s", out, re.M)]
    positions = [re.search(rf"^  {name}\s", out, re.M).start() for name in listed]
    assert listed[:8] == list(WORKFLOW[:8]) and positions == sorted(positions)
    for args in (("-V",), ("--version",), ("version",)):
        code, out, _ = run_cli(*args)
        assert code == 0 and out.strip() == f"cheaptune {__version__}"


@pytest.mark.parametrize("command", sorted(_options()))
def test_every_command_help_has_exit_codes_and_readable_metavars(run_cli, command):
    code, out, _ = run_cli(*command.split(), "--help")
    assert code == 0 and "Exit codes: 0" in out and "<bool>" not in out, out
    if command in ("plan", "launch", "train"):
        assert re.search(r"\b3\b", out.split("Exit codes", 1)[1])
    if "--spot" in _options()[command]:
        assert "auto|only|never" in out
    if command == "prices":
        assert "CHEAPTUNE_PRICES" in out and "CHEAPTUNE_HOME" in out


def test_gpus_rounds_memory_as_plan_does(run_cli, monkeypatch):
    from cheaptune.catalog.gpus import list_gpus

    odd = next(g for g in list_gpus() if g.memory_gib != round(g.memory_gib))  # e.g. 23.99 GiB
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("gpus")
    row = next(line for line in out.splitlines() if f" {odd.name} " in line)
    assert code == 0 and f" {odd.memory_gib:.0f} " in row and f"{odd.memory_gib:g}" not in row
