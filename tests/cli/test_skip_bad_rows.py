"""The bad-row message says `pass --skip-bad-rows`: every command that reads a dataset file must take it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import typer

from cheaptune.cli.main import build_app
from cheaptune.errors import BadInput
from cheaptune.plan.sources import build_workload


def test_every_command_that_loads_dataset_rows_offers_skip_bad_rows():
    group = typer.main.get_command(build_app())
    for name in ("plan", "train", "eval"):
        flags = {f for p in group.commands[name].params for f in p.opts}
        assert "--skip-bad-rows" in flags, name


def test_plan_counts_the_data_without_its_bad_rows_when_asked(tmp_path):
    good = {"messages": [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good) + "\n")
    spec = SimpleNamespace(id="meta-llama/Llama-3.1-8B", family="llama-3.1")  # not a folder: estimated
    args = (spec, str(path), None, None, None, 1.0, 512, 16)
    with pytest.raises(BadInput, match="--skip-bad-rows"):
        build_workload(*args)
    w = build_workload(*args, skip_bad_rows=True)
    assert w.examples == 2 and w.tokens > 0


def test_the_plan_docs_say_plan_takes_skip_bad_rows():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "plan.md").read_text()
    assert "`--skip-bad-rows`" in text
