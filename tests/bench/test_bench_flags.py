"""The accuracy benches refuse an argument they do not take (exit 2, one line) before any work: `--help` or a
typo used to start a full run that rewrote bench/results/*.json."""

from __future__ import annotations

import pytest

SCRIPTS = ("job_accuracy", "throughput_accuracy", "grpo_accuracy", "multi_gpu_accuracy")


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_argument_is_refused_before_the_run(bench, name, capsys, monkeypatch):
    mod = bench(name)
    monkeypatch.setattr(mod, "RESULTS", None, raising=False)  # a run that got past the check would fail on it
    assert mod.main(["--json", "--wirte-data"]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [out[0]] and "'--wirte-data'" in out[0] and "[--json]" in out[0]


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_the_usage_and_runs_nothing(bench, name, capsys):
    mod = bench(name)
    assert mod.main(["--help"]) == 0
    assert capsys.readouterr().out.strip() == mod.__doc__.strip()


def test_job_bench_quick_fit_writes_no_data(bench, capsys):
    assert bench("job_accuracy").main(["--quick", "--write-data"]) == 2
    assert "drop --quick" in capsys.readouterr().out
