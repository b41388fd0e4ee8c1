"""One vocabulary across commands: flags that mean the same everywhere, the old spellings, the help's shape.

Old spellings are rewritten to the new ones before click parses (with one deprecation line on stderr),
so each command declares only the new flag and reads one parameter. The README's vocabulary table is
the user's copy of these facts; tests/cli/test_vocabulary.py holds the two together.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import typer
from typer.core import TyperGroup

from cheaptune.cli.checks import bounded

SPOT_CHOICES = ("auto", "only", "never")
Spot = Literal["auto", "only", "never"]  # annotate a `spot_option()` parameter with this

# command -> old flag -> new flag; the old spellings go in the release after 0.x (see the README table).
RENAMED: dict[str, dict[str, str]] = {
    "plan": {"--gpus": "--gpu", "--providers": "--provider"},
    "estimate": {"--gpus": "--gpu-count"},
    "train": {"--gpus": "--gpu-count"},
    "launch": {"--dataset": "--data", "--disk-gb": "--disk-gib"},
}
SPOT_WAS_SWITCH = ("launch", "doctor", "prices")  # `--spot` alone and `--on-demand` were switches here
RANKINGS = ("cost", "time")  # `plan --objective` took these before it meant the training objective

# The order `cheaptune --help` lists commands in: the order a new user needs them.
WORKFLOW = ("plan", "estimate", "doctor", "train", "launch", "runs", "report", "compare", "prices", "gpus",
            "models", "eval", "export", "calibrate", "version")

EXIT_MEANINGS = {0: "done", 2: "bad input (one line on stderr says what to fix)", 3: "nothing feasible or over budget",
                 10: "stopped at the budget or time cap (resumable)", 11: "out of GPU memory after every fallback "
                 "(a larger GPU resumes it)", 143: "preempted or interrupted (run again to resume)"}
# The codes each command can end with (errors.py maps exceptions to them); the rest: 0 and 2.
EXIT_CODES: dict[str, tuple[int, ...]] = {"plan": (0, 2, 3), "launch": (0, 2, 3, 10, 11), "train": (0, 2, 3, 10, 11, 143),
                                          "version": (0,)}


def spot_option(help_auto: str) -> Any:
    """`--spot auto|only|never`, the same flag in every command; `help_auto` says what auto means there."""
    return typer.Option("auto", "--spot", case_sensitive=False,
                        help=f"only: spot offers; never: on-demand; auto: {help_auto}.")


def names_given(flag: str, values: Sequence[str] | None, listed: str = "cheaptune gpus") -> tuple[str, ...]:
    """The names a comma-list flag (repeatable or not) gives; a flag given with no name is refused, not
    ignored (`plan --gpu ''` planned every GPU)."""
    from cheaptune.errors import BadInput

    names = tuple(x.strip() for x in ",".join(values or ()).split(",") if x.strip())
    if values is not None and not names:
        raise BadInput(f"{flag} is empty; name at least one (`{listed}` lists them), or leave the flag out")
    return names


def spot_flag(value: str) -> bool | None:
    """auto -> None (decided elsewhere), only -> True, never -> False."""
    return {"auto": None, "only": True, "never": False}[value.lower()]


def modernize(command: str, args: Sequence[str]) -> list[str]:
    """`args` with old spellings replaced by the new ones, a deprecation line on stderr for each."""
    renamed, out = RENAMED.get(command, {}), []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        flag, eq, value = arg.partition("=")
        if flag in renamed:
            out.append(renamed[flag] + eq + value)
            _deprecated(command, flag, renamed[flag])
        elif command == "plan" and flag == "--objective" and _ranking(value if eq else args[i + 1:i + 2]):
            out.append("--optimize" + eq + value)
            _deprecated(command, "--objective cost|time", "--optimize cost|time")
        elif command in SPOT_WAS_SWITCH and arg == "--on-demand":
            out += ["--spot", "never"]
            _deprecated(command, arg, "--spot never")
        elif command in SPOT_WAS_SWITCH and arg == "--spot" and _switch_follows(args[i + 1:]):
            out += ["--spot", "only"]
            _deprecated(command, "--spot (as a switch)", "--spot only")
        else:
            out.append(arg)
    return out


def _ranking(value: str | Sequence[str]) -> bool:
    """The value given to `plan --objective` is a ranking (the old meaning), not a training objective."""
    given = value if isinstance(value, str) else (value[0] if value else "")
    return given.strip().lower() in RANKINGS


def _switch_follows(rest: Sequence[str]) -> bool:
    """`--spot` was the old switch when what follows is not its value: nothing, an option, a file or a
    subcommand (a bad value, like `--spot sometimes`, is left for click to refuse)."""
    return not rest or rest[0].startswith("-") or Path(rest[0]).exists() or rest[0] in ("refresh", "import-skypilot")


def _deprecated(command: str, old: str, new: str) -> None:
    typer.echo(f"note: `cheaptune {command} {old}` is deprecated and goes in the next release; use {new}", err=True)


def exit_epilog(command: str) -> str:
    """'Exit codes: 0 done, 2 bad input ...' for one command's help."""
    return "Exit codes: " + "; ".join(f"{c} {EXIT_MEANINGS[c]}" for c in EXIT_CODES.get(command, (0, 2))) + "."


def polish(cmd: Any, name: str, ctx: typer.Context) -> Any:
    """Readable metavars (a flag shows none, not `<bool>`) and the exit codes in the help, recursively."""
    cmd.rich_markup_mode = None  # click's plain help: it wraps to the terminal and never cuts an option name
    helper = cmd.get_help_option(ctx)
    for p in [*cmd.params, *([helper] if helper else [])]:
        if getattr(p, "param_type_name", "") == "option" and p.metavar is None:
            label = "" if p.is_flag else p.display_type(ctx).strip("<>").removesuffix(" range")
            p.metavar = label if "|" in label else READABLE.get(label, label.upper())
        if getattr(p, "param_type_name", "") == "argument":
            p.display_type_rich = lambda ctx: ""  # `MODEL`, not `MODEL <str>`: the name says what it is
            p.metavar = p.metavar or p.name.upper()
            p._usage_display_name = functools.partial(_usage_name, p)  # typer 0.29 writes a required one {config}
    paragraphs = (cmd.help or "").split("\n\n")
    own = [x for x in paragraphs if x.lstrip().startswith("Exit codes")]
    if own:  # train and launch say theirs in full: at the bottom, where every other command says them
        cmd.help = "\n\n".join(x for x in paragraphs if x not in own)
        cmd.epilog = " ".join(" ".join(x.split()) for x in own)
    elif cmd.epilog is None:
        cmd.epilog = exit_epilog(name)
    for sub in getattr(cmd, "commands", {}).values():
        polish(sub, name, ctx)  # a group's subcommands end with the group's codes
    return cmd


def _usage_name(arg: Any) -> str:
    """An argument in the usage line as click and man pages write it: `CONFIG` required, `[CONFIG]` optional."""
    name = arg.metavar + ("..." if arg.nargs != 1 else "")
    return name if arg.required else f"[{name}]"


READABLE = {"": "", "int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH", "list[str]": "TEXT"}


class VocabGroup(TyperGroup):
    """The root group: commands in workflow order, old spellings rewritten, help polished."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        names = super().list_commands(ctx)
        rank = {n: i for i, n in enumerate(WORKFLOW)}
        return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        return None if cmd is None else polish(cmd, cmd_name, ctx)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self.epilog = self.epilog or "Exit codes: " + "; ".join(f"{c} {m}" for c, m in EXIT_MEANINGS.items()) + "."
        polish(self, "", ctx)
        super().format_help(ctx, formatter)

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # noqa: ANN201 - click's signature
        name, cmd, rest = super().resolve_command(ctx, args)
        return name, cmd, modernize(name, rest) if name else rest


# Options several commands declare with the same meaning and the same checks, defined once: each factory
# takes only the help text (what the option does in that command); the flag, default and range stay the same.
MAX_BUDGET_USD = 1e9
MAX_GPUS = 4096


def json_option(what: str = "the result") -> Any:
    """`--json`: one JSON document on stdout instead of tables and progress."""
    return typer.Option(False, "--json", help=f"Print {what} as JSON.")


def force_option(text: str) -> Any:
    """`--force`: go ahead where the command would otherwise refuse."""
    return typer.Option(False, "--force", help=text)


def budget_option(text: str) -> Any:
    """`--budget USD`: a positive amount, checked at the flag."""
    return typer.Option(None, "--budget", callback=bounded(0, MAX_BUDGET_USD, above=True), help=text)


def gpu_count_option(text: str) -> Any:
    """`--gpu-count N`: GPUs per node, checked at the flag."""
    return typer.Option(None, "--gpu-count", callback=bounded(1, MAX_GPUS), help=text)


def network_option(default: str | None, text: str) -> Any:
    """`--network`: between nodes, a named network (ethernet, infiniband), a rate per node (100gbit) or an
    instance type with a stated rate (estimate.time.scaling.network_gbit); anything else is one line at the flag."""
    return typer.Option(default, "--network", callback=_network, help=text)


def _network(value: str | None) -> str | None:
    if value is not None:
        from cheaptune.estimate.time.scaling import network_gbit

        network_gbit(value)
    return value


def checkpoint_dir_option(text: str) -> Any:
    """`--checkpoint-dir PATH`: where checkpoints go (a mounted bucket on a rented machine)."""
    return typer.Option(None, "--checkpoint-dir", help=text)
