import pytest

from cheaptune.cli.checks import describe


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "0", "-1"])
def test_plan_epochs_must_be_finite_and_in_range(run_cli, value):
    code, out, err = run_cli("plan", "tinyllama", "--tokens", "1e6", "--epochs", value)
    assert code == 2
    assert err.strip().splitlines() == [f"error: --epochs must be a number above 0 and at most 1000 (got {float(value)!r})"]
    assert "Traceback" not in out + err


@pytest.mark.parametrize(("args", "flag"), [
    (("plan", "tinyllama", "--examples", "100", "--avg-tokens", "0"), "--avg-tokens must be a whole number from 1"),
    (("plan", "tinyllama", "--tokens", "nan"), "--tokens must be a number from 1"),
    (("plan", "tinyllama", "--tokens", "1e6", "--headroom", "1.5"), "--headroom must be a number from 0 to 0.9"),
    (("estimate", "--model", "tinyllama", "--method", "lora", "--micro-batch", "1", "--seq-len", "64",
      "--headroom", "1.5"), "--headroom must be a number from 0 to 0.9 (got 1.5)"),
    (("estimate", "--model", "tinyllama", "--method", "lora", "--micro-batch", "0", "--seq-len", "64"),
     "--micro-batch must be a whole number from 1 to 65536 (got 0)"),
])
def test_range_is_in_the_message(run_cli, args, flag):
    code, _, err = run_cli(*args)
    assert code == 2 and flag in err and len(err.strip().splitlines()) == 1


def test_describe():
    assert describe(1, 4096, whole=True) == "a whole number from 1 to 4096"
    assert describe(0, 1e9, above=True) == "a number above 0 and at most 1e+09"


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--gpu-count", "0", "--gpu-count must be a whole number from 1 to 4096 (got 0)"),
    ("--epochs", "nan", "--epochs must be a number above 0"),
    ("--lr", "inf", "--lr must be a number above 0 and at most 10 (got inf)"),
    ("--budget", "-5", "--budget must be a number above 0"),
])
def test_train_flags_checked_before_any_file_is_read(run_cli, tmp_path, flag, value, words):
    code, _, err = run_cli("train", "--model", str(tmp_path / "nowhere"), "-o", str(tmp_path / "out"), flag, value)
    assert code == 2 and words in err
    assert not (tmp_path / "out").exists()


def test_plan_save_onto_a_folder_fails_before_planning(run_cli, tmp_path):
    code, out, err = run_cli("plan", "tinyllama", "--tokens", "1e6", "--save", str(tmp_path))
    assert code == 2 and "is a folder; give a file name" in err and out == ""
    assert list(tmp_path.iterdir()) == []


def test_very_long_model_name_is_one_short_line(run_cli):
    code, _, err = run_cli("plan", "m" * 400, "--tokens", "1e6")
    assert code == 2 and "unknown model" in err and len(err) < 400


@pytest.mark.parametrize(("args", "words"), [
    (("--providers", "runpd"), "--provider: no provider 'runpd' in the price catalog (did you mean runpod?)"),
    (("--exclude-providers", "lamda"), "(did you mean lambda"),
    (("--seq-len", "100000"), "--seq-len 100000 is beyond TinyLlama/TinyLlama_v1.1's context of 2048 tokens"),
])
def test_plan_typos_and_long_context_are_one_line(run_cli, args, words):
    code, out, err = run_cli("plan", "tinyllama", "--tokens", "1e6", *args)
    assert code == 2 and words in err and "--allow-long-context" not in err and out == ""


def test_a_bad_flag_is_not_blamed_on_the_config_file(run_cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("base_model: somewhere\n")
    code, _, err = run_cli("train", str(cfg), "--method", "foo")
    assert code == 2 and err.startswith("error: command line: method:") and str(cfg) not in err


def test_an_unchecked_path_error_is_still_one_line(monkeypatch, capsys):
    import typer

    from cheaptune.cli import main as cli_main

    def boom(*args, **kwargs):
        raise IsADirectoryError(21, "Is a directory", "/some/folder")

    monkeypatch.setattr(typer.Typer, "__call__", boom)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["runs"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: cannot use /some/folder: Is a directory\n"


@pytest.mark.parametrize("command", ["plan", "train", "launch"])
def test_shared_options_check_the_same_range_in_every_command(run_cli, command):
    """--budget and --gpu-count are declared once (cli.vocab), so launch checks them as train does."""
    code, _, err = run_cli(command, "--budget", "-3")
    assert code == 2 and err.strip() == "error: --budget must be a number above 0 and at most 1e+09 (got -3.0)"
    if command != "plan":
        code, _, err = run_cli(command, "--gpu-count", "0")
        assert code == 2 and err.strip() == "error: --gpu-count must be a whole number from 1 to 4096 (got 0)"
