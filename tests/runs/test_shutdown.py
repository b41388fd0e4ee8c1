import json
import sys

import pytest

from cheaptune.errors import BadInput
from cheaptune.runs.guard import GuardSettings, apply_on_finish
from cheaptune.runs.shutdown import detect_platform, shutdown_command


def test_presets_map_to_platform_commands():
    sky = {"SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": "ft-1"})}
    assert shutdown_command("stop", "auto", env=sky) == ["sky", "autostop", "ft-1", "-i", "0", "-y"]
    assert shutdown_command("terminate", "auto", env=sky)[-2:] == ["--down", "-y"]
    assert shutdown_command("stop", env={"RUNPOD_POD_ID": "abc"}) == ["runpodctl", "stop", "pod", "abc"]
    assert shutdown_command("terminate", env={"RUNPOD_POD_ID": "abc"}) == ["runpodctl", "remove", "pod", "abc"]
    vast = {"CONTAINER_ID": "77", "VAST_CONTAINERLABEL": "C.77"}
    assert shutdown_command("stop", env=vast) == ["vastai", "stop", "instance", "77"]
    assert shutdown_command("terminate", env=vast) == ["vastai", "destroy", "instance", "77"]
    assert shutdown_command("stop", "vm", env={}) == ["shutdown", "-h", "now"]
    assert shutdown_command("nothing", env=sky) is None


def test_detect_platform_does_not_guess_a_vm(tmp_path):
    assert detect_platform({}, dmi_dir=str(tmp_path)) is None
    (tmp_path / "sys_vendor").write_text("Amazon EC2\n")
    assert detect_platform({}, dmi_dir=str(tmp_path)) == "vm"


def test_missing_ids_are_badinput():
    with pytest.raises(BadInput, match="RUNPOD_POD_ID"):
        shutdown_command("stop", "runpod", env={})
    with pytest.raises(BadInput, match="GuardSettings|preset"):
        shutdown_command("stop", "martian", env={})


def test_apply_on_finish_runs_custom_command(tmp_path):
    flag = tmp_path / "ran"
    cmd = [sys.executable, "-c", f"open({str(flag)!r}, 'w').write('x')"]
    s = GuardSettings(on_finish="stop", shutdown_preset="custom", shutdown_command=cmd)
    assert apply_on_finish(s, "preempted") is None and not flag.exists()
    assert apply_on_finish(s, "budget-stopped") == cmd
    assert flag.read_text() == "x"


def test_dry_run_prints_and_does_not_run(tmp_path, capsys):
    flag = tmp_path / "ran"
    cmd = [sys.executable, "-c", f"open({str(flag)!r}, 'w').write('x')"]
    s = GuardSettings(on_finish="terminate", shutdown_command=cmd, dry_run_shutdown=True)
    assert apply_on_finish(s, "failed") == cmd
    assert "would run" in capsys.readouterr().out and not flag.exists()
