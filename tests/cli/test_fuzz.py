"""Every command and option of the CLI, fed hostile values and hostile files (hypothesis).

The property: the exit code is 0, 2 or 3; nothing escapes as a Python exception (which the console
script would print as a traceback); and on exit 2 no file that was there before has changed and no
half-written temporary file is left, in the work folder or in CHEAPTUNE_HOME.

The command list and each command's options are read from the app itself, so a new option is fuzzed
the day it is added. In `make test` the profile is small and derandomized (stable CI); `make fuzz`
runs the long random profile (HYPOTHESIS_PROFILE=fuzz-long).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import traceback
from pathlib import Path

import click
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cheaptune.cli.main import build_app, main

settings.register_profile("fuzz-ci", max_examples=8, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("fuzz-long", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fuzz-ci")
SKIP = {("prices", "refresh"),  # fetches live prices: the network, not input handling
        ("ui",)}  # serves until stopped; its input checks are in tests/ui/test_cli.py
TEMP_LEFT = re.compile(r"^\..+\.tmp")  # what util.atomic names its temporary files and folders
VOLATILE = ("runs.sqlite",)  # SQLite rewrites its own files on reads (WAL checkpoints)


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    root = typer.main.get_command(build_app())
    out = []
    for name, cmd in sorted(root.commands.items()):
        subs = getattr(cmd, "commands", None)
        if subs:
            out += [((name, sub), c) for sub, c in sorted(subs.items()) if (name, sub) not in SKIP]
        if (name,) not in SKIP:
            out.append(((name,), cmd))
    return out


COMMANDS = _commands()


def _hostile_files(root: Path) -> list[str]:
    """Paths a careless or hostile user passes: folders, binary, truncated, wrong-shape, odd CSV/JSONL."""
    (root / "folder").mkdir()
    (root / "folder.jsonl").mkdir()
    (root / "folder.yaml").mkdir()
    files = {
        "empty.yaml": b"", "empty.jsonl": b"", "binary.yaml": bytes(range(255, 127, -1)),
        "binary.jsonl": b"\x00\xff" * 40, "binary.csv": b"\xc3\x28\xa0\xa1",
        "truncated.yaml": b"base_model: x\ndatasets:\n  - path: d.jsonl\n    type: mess",
        "truncated.json": b'{"model_type": "llama", "hidden_size": 64, "num_hid',
        "list.yaml": b"- a\n- b\n", "scalar.yaml": b"42\n", "tabs.yaml": b"a:\n\tb: 1\n",
        "wrongtypes.yaml": b"base_model: [1, 2]\nnum_epochs: {a: 1}\nlora_r: -3\n",
        "mixed.jsonl": b'{"text": "ok"}\nnot json\n[1, 2]\n{"messages": "x"}\n\xff\n',
        "missing_cols.csv": b"provider,gpu\naws,A100\n", "extra_cols.csv": b"a,b\n1,2,3,4\n",
        "config.json": b'{"model_type": "llama", "hidden_size": -1}', "plan.yaml": b"version: 99\noffer: 3\n",
        "huge_numbers.yaml": b"num_epochs: 1e308\nlearning_rate: .nan\nmicro_batch_size: 99999999999999\n",
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    os.symlink(root / "nowhere", root / "dangling.yaml")
    generated = [f"gen.{ext}" for ext in GEN_EXT]  # rewritten by each example (see _contents)
    return [str(root / n) for n in (*files, *generated, "folder", "folder.jsonl", "folder.yaml", "dangling.yaml")]


@pytest.fixture
def pool(tmp_path) -> list[str]:
    root = tmp_path / "files"
    root.mkdir()
    numbers = ["0", "-1", "1", "nan", "inf", "-inf", "1e308", "1e-308", "99999999999999999999", "0.5", "1.5",
               "2048", "100000", "1e6"]
    words = ["", " ", "auto", "lora", "tinyllama", "TinyLlama/TinyLlama_v1.1", "owner/name", "a" * 300,
             "ünïcødé ✓", "\x1b[31mred", "tab\there", "nul\x01ctl", "../../etc/passwd", "/dev/null",
             "-", "--", "--json", "runpd", "aws,gcp", "A100", "h100", "~", "{}", "[]"]
    return numbers + words + _hostile_files(root)


GEN_EXT = ("yaml", "jsonl", "json", "csv")
VALID = [  # good files of each kind, to be cut short by _contents
    b"base_model: x\nmethod: lora\nnum_epochs: 1\ndatasets:\n  - path: d.jsonl\n    type: auto\n",
    b'{"text": "a"}\n{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n',
    b'{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 99}',
    b"provider,kind,gpu,gpu_count,instance_type,region,price_per_hour\naws,spot,A100,1,p4,us,1.5\n",
]


@st.composite
def _contents(draw) -> bytes:
    """Random bytes, or a good file of some kind truncated at a random point."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=120))
    good = draw(st.sampled_from(VALID))
    return good[:draw(st.integers(0, len(good)))]


def _values(pool: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(pool), st.text(max_size=20).filter(lambda s: "\x00" not in s))


@st.composite
def _argv(draw, path: tuple[str, ...], cmd: click.Command, pool: list[str]) -> list[str]:
    values = _values(pool)
    options: list[str] = []
    positional: list[str] = []
    for p in cmd.params:
        if not draw(st.booleans()):
            continue
        if isinstance(p, click.Argument):
            positional += draw(st.lists(values, min_size=1, max_size=2)) if p.nargs == -1 else [draw(values)]
        elif getattr(p, "is_flag", False):
            options.append(draw(st.sampled_from([*p.opts, *p.secondary_opts])))
        elif p.opts != ["--help"]:
            options += [draw(st.sampled_from(p.opts)), draw(values)]
    return [*path, *options, "--", *positional] if positional else [*path, *options]


def _snapshot(*roots: Path) -> dict[Path, tuple[int, int]]:
    out = {}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in names:
                p = Path(dirpath, n)
                with contextlib.suppress(OSError):
                    st_ = p.lstat()
                    out[p] = (st_.st_size, st_.st_mtime_ns)
    return out


def _leftovers(*roots: Path) -> list[str]:
    return [os.path.join(d, n) for root in roots for d, dirs, names in os.walk(root)
            for n in (*dirs, *names) if TEMP_LEFT.match(n)]


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_no_traceback_on_any_input(path, cmd, pool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative defaults (./outputs, reports/) land here
    home = Path(os.environ["CHEAPTUNE_HOME"])

    @settings(settings.get_profile(PROFILE))
    @given(argv=_argv(path, cmd, pool), content=_contents())
    def check(argv: list[str], content: bytes) -> None:
        for ext in GEN_EXT:
            (tmp_path / "files" / f"gen.{ext}").write_bytes(content)
        before = _snapshot(tmp_path, home)
        out, err = io.StringIO(), io.StringIO()
        code: object = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as exc:
                code = 0 if exc.code is None else exc.code
            except BaseException:  # what the console script would print as a traceback
                pytest.fail(f"cheaptune {argv!r} raised:\n{traceback.format_exc()}")
        text = out.getvalue() + err.getvalue()
        assert code in (0, 2, 3), f"cheaptune {argv!r} exited {code!r}: {text[-600:]}"
        assert "Traceback" not in text, f"cheaptune {argv!r} printed a traceback: {text[-600:]}"
        if code == 2:
            after = _snapshot(tmp_path, home)
            changed = [str(p) for p, v in before.items() if after.get(p) != v and not p.name.startswith(VOLATILE)]
            assert not changed, f"cheaptune {argv!r} exited 2 but changed {changed}"
            assert not _leftovers(tmp_path, home), f"cheaptune {argv!r} left {_leftovers(tmp_path, home)}"

    check()
