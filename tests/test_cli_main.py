import subprocess
import sys

from cheaptune import __version__
from cheaptune.cli.main import command_modules


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0
    assert __version__ in out


def test_every_command_module_registers():
    import importlib

    for name in command_modules():
        module = importlib.import_module(f"cheaptune.cli.{name}")
        assert callable(getattr(module, "register", None)), f"cheaptune.cli.{name} has no register(app)"


def test_help_does_not_import_torch():
    code = "import sys; from cheaptune.cli.main import main\ntry:\n main(['--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_commands_are_registered_once_however_often_main_runs(run_cli):
    from cheaptune.cli.main import app

    run_cli("version")
    counts = (len(app.registered_commands), len(app.registered_groups))
    for _ in range(3):
        assert run_cli("version")[0] == 0
    assert (len(app.registered_commands), len(app.registered_groups)) == counts
