"""`train --resume` alone means `--resume auto`: the advice the budget stop prints is a command that works."""

from cheaptune.cli.train import bare_resume


def test_bare_resume_means_auto(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("base_model: x\n")
    assert bare_resume([str(cfg), "--resume"]) == [str(cfg), "--resume", "auto"]
    assert bare_resume(["--resume", str(cfg)]) == ["--resume", "auto", str(cfg)]  # the config is not a checkpoint
    assert bare_resume(["--resume", "--force"]) == ["--resume", "auto", "--force"]
    for value in ("never", "auto", str(tmp_path / "checkpoint-4"), "/missing/checkpoint-9"):
        assert bare_resume(["--resume", value]) == ["--resume", value]  # a missing folder still gets its error
