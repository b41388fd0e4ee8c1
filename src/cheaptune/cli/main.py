"""The `cheaptune` console script: finds the command modules and maps errors to exit codes."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys

import typer
from typer._click import exceptions as click_errors  # typer 0.29 vendors click: its errors are these

import cheaptune
import cheaptune.cli as cli_pkg
from cheaptune.cli.vocab import VocabGroup
from cheaptune.errors import CheaptuneError

START_HERE = (
    "Fine-tune LLMs as cheaply as possible: plan, estimate, train, launch, report.\n\n"
    "Start here: `cheaptune plan MODEL --data data.jsonl --budget 20 --save plan.yaml` ranks the cheapest ways.\n\n"
    "Then: `cheaptune train --plan plan.yaml` runs it here, or `cheaptune launch plan.yaml` on a rented GPU.")

app = typer.Typer(
    name="cheaptune",
    help=START_HERE,
    cls=VocabGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cheaptune {cheaptune.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


@app.command("version")
def version_command() -> None:
    """Print cheaptune's version."""
    _version(True)


def command_modules() -> list[str]:
    """Every module of cheaptune.cli that registers commands (discovered, not listed by hand)."""
    return sorted(
        m.name for m in pkgutil.iter_modules(cli_pkg.__path__) if m.name not in {"main", "output", "checks", "vocab", "grpo"}
    )


@functools.cache
def build_app() -> typer.Typer:
    """Register every command once per process: typer appends on each `register`, so a second pass would
    double every command (and an in-process caller, like the test suite, would slow down call after call)."""
    for name in command_modules():
        module = importlib.import_module(f"cheaptune.cli.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
    return app


def usage_line(err: click_errors.UsageError) -> str:
    """A click usage error (unknown flag or command, bad value) as one line naming the help to read."""
    where = err.ctx.command_path if err.ctx is not None else "cheaptune"
    message = err.format_message().replace("Value error, ", "").rstrip(". ")
    return f"error: {message} (see `{where} --help`)"


BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"  # logging.getLogger(__name__) in that module


def quiet_stack_warnings() -> None:
    """The stack's deprecation notices (transformers' v6 renames, past_key_values -> cache, ...) warn on every
    train, eval or export about arguments trl and peft pass, which the user can do nothing about: not shown
    for any command (the user's own code's still are). bitsandbytes' CPU backend logs, at import on a CPU with
    AVX-512 BF16, that its optional CPU 4-bit kernel package is missing (bitsandbytes 0.50.2 backends/cpu/ops.py,
    the "kernels-community" warning): cheaptune runs no 4-bit matmul on the CPU (the estimator's fake tensors
    compute nothing, training runs on the GPU), so that logger shows errors only."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl|peft|accelerate|torch)(\.|$)")
    logging.getLogger(BNB_CPU_LOGGER).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a CheaptuneError or a usage error becomes one line on stderr and its exit code."""
    quiet_stack_warnings()
    build_app()
    try:
        code = app(args=argv, prog_name="cheaptune", standalone_mode=False)  # errors come here, not boxed
    except click_errors.NoArgsIsHelpError as err:  # `cheaptune` alone: the help, as asked
        err.show()
        sys.exit(err.exit_code)
    except click_errors.UsageError as err:
        typer.echo(usage_line(err), err=True)
        sys.exit(err.exit_code)
    except click_errors.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except typer.Abort:
        typer.echo("Aborted.", err=True)
        sys.exit(1)
    except CheaptuneError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except OSError as err:  # last resort for a path no reader checked (the fuzz test hunts these down)
        if err.filename is None:
            raise
        typer.echo(f"error: cannot use {err.filename}: {err.strerror or type(err).__name__}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
