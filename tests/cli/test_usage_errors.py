"""Click's usage errors (unknown flag or command, a value of the wrong type or choice) are one line on
stderr with exit 2, like every other bad input; help and --version still exit 0."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args, names", [
    (("plan", "--bugdet", "3", "x"), ("--bugdet", "--budget", "cheaptune plan --help")),
    (("plna",), ("plna", "Did you mean 'plan'", "cheaptune --help")),
    (("plan", "x", "--spot", "sometimes"), ("--spot", "'sometimes'", "'never'")),
    (("estimate", "x", "--seq-len", "abc"), ("--seq-len", "integer", "cheaptune estimate --help")),
])
def test_a_usage_error_is_one_line_and_exit_2(run_cli, args, names):
    code, out, err = run_cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: ")
    assert all(name in lines[0] for name in names) and "Usage:" not in err and "Value error" not in err


def test_help_and_version_still_exit_0(run_cli):
    code, out, _ = run_cli("plan", "--help")
    assert code == 0 and "Usage" in out and "--budget" in out
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("cheaptune ")
    code, out, err = run_cli()
    assert "Usage" in out + err and "plan" in out + err  # no arguments: the help, as before
