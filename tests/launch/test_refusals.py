"""train, launch's dry run and doctor refuse a config the same way (train.config.check_before_load): one line,
exit 2, before any model loads or any machine is rented."""

from __future__ import annotations

import pytest

REFUSED = [  # (config lines, what the one line says)
    ("optimizer: banana\n", "optimizer 'banana' is not a transformers OptimizerNames"),
    ("lr_scheduler: cosin\n", "lr_scheduler 'cosin' is not a transformers SchedulerType (did you mean cosine"),
    ("alert_thresholds: [20]\n", "alert thresholds are fractions of the budget in (0, 10]"),
    ("method: prompt_tuning\nmerge: true\n", "--merge is not possible for prompt_tuning"),
    ("report_to: tensorbord\n", "report_to: unknown tracker 'tensorbord'"),
    ("eval_after: true\n", "eval_after scores an adapter against its base on held-out rows"),
]


def _one_line(code: int, out: str, err: str) -> str:
    lines = [x for x in err.strip().splitlines() if "kernels" not in x]  # bitsandbytes' harmless import line
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


@pytest.mark.parametrize(("lines", "says"), REFUSED, ids=[r[0].splitlines()[-1].split(":")[0] for r in REFUSED])
def test_train_launch_and_doctor_refuse_the_same_config(lines, says, tmp_path, plan_file, run_cli):
    data = tmp_path / "train.jsonl"  # plan_file's dataset; the model is the plan's (train: none, refused after)
    config = tmp_path / "cfg.yaml"
    config.write_text(f"datasets: [{{path: {data}}}]\n" + lines)
    for argv in (("doctor", str(config)), ("train", str(config), "--device", "cpu", "--output-dir",
                                           str(tmp_path / "out")),
                 ("launch", str(plan_file), "--dry-run", "--config", str(config), "--out", str(tmp_path / "t.yaml"))):
        line = _one_line(*run_cli(*argv))
        assert says in line, (argv[0], line)
    assert not (tmp_path / "t.yaml").exists() and not (tmp_path / "out").exists()


def test_a_config_naming_no_optimizer_or_scheduler_is_checked_without_torch():
    """doctor stays a sub-second check: transformers' name lists (torch, ~5 s) are read only for names set."""
    import subprocess
    import sys

    code = ("import sys; from cheaptune.train.config import check_before_load, validate; "
            "check_before_load(validate({'base_model': 'm/x', 'on_finish': 'stop'})); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("lines", ["liger_kernel: true\n", "optimizer: paged_adamw_8bit\n", "attn: flash\n"])
def test_the_dry_run_refuses_a_config_needing_packages_the_task_does_not_install(lines, tmp_path, plan_file, run_cli):
    """The task installs the extras the plan's settings need (launch.task.extras); the plan here is a LoRA without
    speed options, so a config turning one on would be refused by train on the machine after the boot."""
    config = tmp_path / "cfg.yaml"
    config.write_text(lines)
    line = _one_line(*run_cli("launch", str(plan_file), "--dry-run", "--config", str(config), "--out",
                              str(tmp_path / "t.yaml")))
    assert "the task installs only what the plan's settings need" in line and "cheaptune[" in line, line
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize("out", [".", "folder"])  # "" is refused as empty (tests/cli/test_empty_flags.py)
def test_the_dry_run_refuses_a_folder_as_the_task_path_and_writes_nothing(out, tmp_path, plan_file, run_cli,
                                                                          monkeypatch):
    """`--out .` staged a hidden `.files` folder in the current one before the YAML could not be written."""
    work = tmp_path / "cwd"
    (work / "folder").mkdir(parents=True)
    monkeypatch.chdir(work)
    line = _one_line(*run_cli("launch", str(plan_file), "--dry-run", "--out", out))
    assert "is a folder, not a file" in line and "task.yaml" in line, line
    assert sorted(p.name for p in work.rglob("*")) == ["folder"]
