"""A filter given with a value that matches nothing is refused in one line (exit 2), never an empty table
or an unfiltered plan with exit 0 (issue 33: `prices --provider nosuch`, `plan --gpu ''`, `plan ''`)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("args", "says"), [
    (("prices", "--provider", "nosuch"), "--provider: no provider 'nosuch' in the price catalog"),
    (("prices", "--provider", "vast,nosuch"), "--provider: no provider 'nosuch'"),
    (("prices", "--provider", ""), "--provider is empty"),
    (("prices", "--max-price", "-1"), "--max-price must be a number above 0"),
    (("prices", "--max-price", "nan"), "--max-price must be a number above 0"),
    (("prices", "--min-memory", "inf"), "--min-memory must be a number from 0"),
    (("prices", "--gpu", ""), "--gpu is empty"),
    (("plan", "Llama-3.2-1B", "--tokens", "1e6", "--gpu", ""), "--gpu is empty"),
    (("plan", "Llama-3.2-1B", "--tokens", "1e6", "--gpu", " , "), "--gpu is empty"),
    (("plan", "Llama-3.2-1B", "--tokens", "1e6", "--provider", ""), "--provider is empty"),
    (("plan", "Llama-3.2-1B", "--tokens", "1e6", "--exclude-providers", ","), "--exclude-providers is empty"),
    (("plan", "Llama-3.2-1B", "--tokens", "1e6", "--method", ""), "--method is empty"),  # planned auto before
    (("plan", "", "--tokens", "1e6"), "the model is empty"),
    (("plan", "--model", " ", "--tokens", "1e6"), "the model is empty"),
])
def test_empty_or_unknown_filter_is_one_line_exit_2(run_cli, args, says):
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "None" not in lines[0]


def test_prices_provider_takes_a_comma_list_and_filters_by_it(run_cli):
    import json

    code, out, err = run_cli("prices", "--provider", "vast,AWS", "--json")
    assert code == 0, err
    providers = {o["provider"] for o in json.loads(out)["offers"]}
    assert providers == {"vast", "aws"}


def test_plan_providers_old_spelling_reaches_the_provider_filter_with_a_note(run_cli):
    code, out, err = run_cli("plan", "Llama-3.2-1B", "--tokens", "1e6", "--providers", "nosuch")
    assert code == 2 and out == ""
    assert "`cheaptune plan --providers` is deprecated" in err and "use --provider" in err
    assert "--provider: no provider 'nosuch'" in err
