"""plan --prices bundled|cache|live and the price ages it shows."""

from __future__ import annotations

import json


def test_plan_shows_price_ages_and_which_prices_it_used(run_cli, tiny_model_dir):
    args = ("plan", str(tiny_model_dir), "--tokens", "100000", "--gpu", "T4", "--seq-len", "128", "--json")
    code, out, err = run_cli(*args)
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("price ages: ") for n in notes)
    assert any("no live cache yet" in n and "prices refresh" in n for n in notes)
    code, out, err = run_cli(*args, "--prices", "bundled")
    assert code == 0, err
    assert "prices: the bundled snapshot only (--prices bundled)" in json.loads(out)["notes"]


def test_unknown_prices_choice_is_one_line(run_cli):
    code, _, err = run_cli("plan", "meta-llama/Llama-2-7b-hf", "--tokens", "100", "--prices", "yesterday")
    assert code == 2 and "--prices must be one of bundled, cache, live" in err and "Traceback" not in err
