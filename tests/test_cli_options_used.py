"""No option is accepted and ignored: every parameter of every command function is read in its body.

A flag that parses but changes nothing is worse than a missing one (the user believes it took effect),
so each command's parameters are checked against the names its body actually uses.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from cheaptune.cli.main import build_app


def _commands(app, prefix=""):
    for cmd in app.registered_commands:
        yield f"{prefix}{cmd.name or cmd.callback.__name__}", cmd.callback
    for group in app.registered_groups:
        yield from _commands(group.typer_instance, f"{prefix}{group.name} ")


def _unused(fn) -> list[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    func = tree.body[0]
    params = [a.arg for a in func.args.args + func.args.kwonlyargs]
    used = {n.id for stmt in func.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return [p for p in params if p not in used]


def test_every_command_reads_every_option_it_accepts():
    commands = dict(_commands(build_app()))
    assert {"plan", "estimate", "train", "launch", "doctor"} <= set(commands)
    ignored = {name: unused for name, fn in commands.items() if (unused := _unused(fn))}
    assert not ignored, f"options accepted and never read: {ignored}"


def test_the_check_sees_an_ignored_option():
    def cmd(used: int, forgotten: int) -> None:
        print(used)

    assert _unused(cmd) == ["forgotten"]
