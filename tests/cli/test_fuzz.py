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
import yaml
from hypothesis import HealthCheck, example, given, settings
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
        code, text = _run(argv, f"arguments {argv!r}")
        assert code in (0, 2, 3), f"cheaptune {argv!r} exited {code!r}: {text[-600:]}"
        assert "Traceback" not in text, f"cheaptune {argv!r} printed a traceback: {text[-600:]}"
        if code == 2:
            after = _snapshot(tmp_path, home)
            changed = [str(p) for p, v in before.items() if after.get(p) != v and not p.name.startswith(VOLATILE)]
            assert not changed, f"cheaptune {argv!r} exited 2 but changed {changed}"
            assert not _leftovers(tmp_path, home), f"cheaptune {argv!r} left {_leftovers(tmp_path, home)}"

    check()


# Hand-edited files: one good plan and one good train config, with fields replaced by hostile values or
# unknown keys added. The property on top of the one above: a command that exits 0 ran with every guard
# rail on (a finite positive price for the meter, a finite positive budget and hourly cap).
HOSTILE = [float("nan"), float("inf"), float("-inf"), -1, -5.0, 0, 0.0, 1e308, 10**30, "", "banana", "1e3", [], {},
           True, False, None, [float("nan")], {"bogus": 1}]
ORDINARY = [1, 0.5, 2048, "any", "lora"]  # values some fields take, so some edits pass and their run is checked
PLAN_BUDGET = 20.0


def _good_plan() -> dict:
    from tests.launch.conftest import make_plan, offer

    plan = make_plan(offer("aws", "A10G", 1.0, total=5.0), [offer("gcp", "L4", 0.8, total=5.2)], budget=PLAN_BUDGET)
    return plan.model_dump(mode="json")


GOOD_CONFIG = {"max_steps": 5, "learning_rate": 2e-4, "save_steps": 2, "budget_usd": 10.0, "max_hours": 2.0,
               "price_per_hour": 1.0, "alert_thresholds": [0.5, 0.8], "logging_steps": 1, "num_epochs": 1}


def _paths(value: object, at: tuple = ()) -> list[tuple]:
    """Every key path in a nested mapping (leaves and inner nodes), so any field can be replaced."""
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


@st.composite
def _edited(draw, good: dict) -> dict:
    """`good` with one to three fields replaced by hostile values, or an unknown key added."""
    import copy

    doc = copy.deepcopy(good)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(good)))
        value = draw(st.sampled_from(HOSTILE + ORDINARY))
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            if draw(st.booleans()) and isinstance(node, dict):
                node[f"unknown_{path[-1]}"] = value
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):  # an earlier edit replaced a parent
            continue
    return doc


def _same(a: dict, b: dict) -> bool:
    """Equal as the YAML files hold them (0 is not false there, as it is to ==)."""
    import json

    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _finite_positive(x: object) -> bool:
    import math

    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _run(argv: list[str], what: str) -> tuple[object, str]:
    """Exit code and combined output of `cheaptune *argv` in this process; any exception but SystemExit fails the
    test, naming the edited input (`what`)."""
    buf = io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            main(argv)
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
        except BaseException:  # what the console script would print as a traceback
            pytest.fail(f"{argv[0]} with {what} raised:\n{traceback.format_exc()}")
    return code, buf.getvalue()


def _guard_rails_on(out: Path) -> None:
    """What a task that launched would run with: a real price per cloud, a real cap, a real budget, and a
    train config (built on the machine exactly as there) whose meter and cap are on."""
    import json
    import shlex

    import yaml

    from cheaptune.launch.options import LaunchOptions
    from cheaptune.launch.verify import check_run  # train's own build, as the machine runs it

    task = yaml.safe_load(out.read_text())
    prices = json.loads(task["envs"]["CHEAPTUNE_OFFER_PRICES"])
    assert prices and all(_finite_positive(p) for p in prices.values()), prices
    cap = task["resources"].get("max_hourly_cost")
    assert cap is None or _finite_positive(cap), cap
    words = shlex.split(task["run"].strip().splitlines()[-1].replace('"$PRICE"', "P").replace('"$NOTICE"', "N"))
    assert "--budget" in words and _finite_positive(float(words[words.index("--budget") + 1])), task["run"]
    staging = out.parent / f"{out.stem}.files"
    check_run(staging, LaunchOptions(), max(prices.values()))  # raises if the machine's train would refuse it


@pytest.mark.parametrize("edit", ["plan", "config"])
def test_hand_edited_plan_and_config_never_launch_with_a_guard_rail_off(edit, tmp_path, monkeypatch):
    import yaml

    monkeypatch.chdir(tmp_path)
    good_plan = _good_plan()

    @settings(settings.get_profile(PROFILE))
    @given(plan=_edited(good_plan) if edit == "plan" else st.just(good_plan),
           config=_edited(GOOD_CONFIG) if edit == "config" else st.just(GOOD_CONFIG))
    @example(plan=good_plan, config=GOOD_CONFIG)  # the unedited files launch: the exit-0 check is not vacuous
    def check(plan: dict, config: dict) -> None:
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
        (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
        out = tmp_path / "o" / "task.yaml"
        argv = ["launch", "plan.yaml", "--config", "train.yaml", "--dry-run", "--out", str(out), "--install", "cheaptune"]
        code, text = _run(argv, f"{edit} {plan if edit == 'plan' else config!r}")
        assert code in (0, 2, 3) and "Traceback" not in text, f"exit {code!r}: {text[-600:]}"
        if _same(plan, good_plan) and _same(config, GOOD_CONFIG):  # unedited, or edited to the same values
            assert code == 0, text[-600:]
        if code == 0:
            _guard_rails_on(out)
        else:
            assert len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1, text[-600:]
            assert not out.exists(), "a refused launch wrote its task"
        if out.exists():
            import shutil

            shutil.rmtree(out.parent)

    check()


def _meters_and_caps_on(cfg, config: dict) -> None:
    """What `train` would have run with: every guard-rail number finite and in range, a budget, and a price
    that is the plan's or the config's own (0 only where the config file itself says the machine is free)."""
    import math

    assert _finite_positive(cfg.budget_usd), cfg.budget_usd  # both files carry one: it is never dropped
    assert cfg.price_per_hour is not None and math.isfinite(cfg.price_per_hour), cfg.price_per_hour
    assert cfg.price_per_hour > 0 or config.get("price_per_hour") == 0, (cfg.price_per_hour, config)
    assert cfg.max_hours is None or _finite_positive(cfg.max_hours), cfg.max_hours
    assert all(_finite_positive(t) for t in cfg.alert_thresholds), cfg.alert_thresholds
    assert cfg.predicted_cost_usd is None or math.isfinite(cfg.predicted_cost_usd), cfg.predicted_cost_usd


@pytest.mark.parametrize("edit", ["plan", "config"])
def test_hand_edited_plan_and_config_never_train_with_a_guard_rail_off(edit, tmp_path, monkeypatch):
    """`train PLAN-EDITED config --plan`: the same edits. The run is the test's recorder (cli.train calls
    train.run.train after every check), so an exit 0 shows the config the trainer would have metered."""
    import json

    import yaml

    from cheaptune.demo.tiny import tiny_llama_config
    from cheaptune.train import run as train_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(tiny_llama_config(64).to_dict()))
    ran: list = []
    monkeypatch.setattr(train_run, "train", lambda cfg, **_: ran.append(cfg) or train_run.TrainResult(tmp_path, {}, None))
    good_plan = {**_good_plan(), "model": str(tmp_path / "model")}

    @settings(settings.get_profile(PROFILE))
    @given(plan=_edited(good_plan) if edit == "plan" else st.just(good_plan),
           config=_edited(GOOD_CONFIG) if edit == "config" else st.just(GOOD_CONFIG))
    @example(plan=good_plan, config=GOOD_CONFIG)  # the unedited files train: the exit-0 check is not vacuous
    def check(plan: dict, config: dict) -> None:
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
        (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
        ran.clear()
        code, text = _run(["train", "train.yaml", "--plan", "plan.yaml", "--device", "cpu", "-o", str(tmp_path / "o")],
                          f"{edit} {plan if edit == 'plan' else config!r}")
        assert code in (0, 2, 3) and "Traceback" not in text, f"exit {code!r}: {text[-600:]}"
        if _same(plan, good_plan) and _same(config, GOOD_CONFIG):  # unedited, or edited to the same values
            assert code == 0, text[-600:]
        if code == 0:
            (cfg,) = ran
            _meters_and_caps_on(cfg, config)
        else:
            assert not ran and len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1, text[-600:]

    check()


def test_doctor_on_a_hand_edited_config_refuses_what_train_refuses(tmp_path, monkeypatch):
    """`doctor CONFIG` on the same edits: one error line and exit 2 for a file train's validation refuses, and
    exit 0 only for one it takes, whose budget, price and caps are then finite (doctor never passes a cap off)."""
    import yaml

    from cheaptune.errors import BadInput
    from cheaptune.train.config import build

    monkeypatch.chdir(tmp_path)

    @settings(settings.get_profile(PROFILE))
    @given(config=_edited(GOOD_CONFIG))
    @example(config=GOOD_CONFIG)
    def check(config: dict) -> None:
        (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
        code, text = _run(["doctor", "train.yaml"], repr(config))
        assert code in (0, 2) and "Traceback" not in text, f"exit {code!r}: {text[-600:]}"
        try:
            cfg = build(tmp_path / "train.yaml")
        except BadInput:
            assert code == 2 and len(text.strip().splitlines()) == 1, text[-600:]
            return
        assert code == 0, text[-600:]
        for value in (cfg.budget_usd, cfg.price_per_hour, cfg.max_hours, *cfg.alert_thresholds):
            assert value is None or (isinstance(value, int | float) and value == value and abs(value) != float("inf")
                                     and value >= 0), (value, config)

    check()


@pytest.mark.parametrize("key", ["budget_usd", "price_per_hour", "max_hours", "alert_thresholds"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_train_config_refuses_non_finite_guard_rail_numbers(key, value, tmp_path):
    from cheaptune.errors import BadInput
    from cheaptune.train.config import validate

    with pytest.raises(BadInput, match=key):
        validate({"base_model": "x", key: [value] if key == "alert_thresholds" else value})


# The random edits above reach each (field, value) pair only by chance (8 examples in CI). The sweep below
# gives EVERY field of both file kinds each value kind issue 33 names, deterministically, at the validators
# every command reads these files through (plan: planfile.load, as launch and train --plan do; config:
# train.config.build, as train, doctor and launch --config do), plus the train merge of an accepted plan.
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: the sweep writes ~1,500 files
KINDS = {"nan": [float("nan")], "inf": [float("inf"), float("-inf")], "negative": [-1, -5.0],
         "empty": ["", [], {}], "wrong-type": ["banana", [1], True], "unknown": ["nosuch-value-xyz"]}
GUARD_RAILS = ("budget_usd", "price_per_hour", "max_hours", "idle_minutes", "predicted_cost_usd")


def _config_fields() -> list[str]:
    from cheaptune.train.config import TrainConfig

    return sorted(TrainConfig.model_fields)


def _guard_rails_in_range(cfg, what: str) -> None:
    """An accepted file runs with every guard-rail number finite and not negative, the thresholds in (0, 1],
    and the guard's own settings built (train builds them before any model loads)."""
    import math

    for name in GUARD_RAILS:
        value = getattr(cfg, name)
        assert value is None or (not isinstance(value, bool) and math.isfinite(value) and value >= 0), (name, what)
    assert cfg.budget_usd is None or cfg.budget_usd > 0, what
    assert all(0 < t <= 1 for t in cfg.alert_thresholds), (cfg.alert_thresholds, what)


def _one_line(err: Exception, what: str) -> None:
    assert str(err).strip() and "\n" not in str(err).strip(), (str(err), what)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_config_field_takes_each_value_kind(kind, tmp_path):
    from cheaptune.errors import BadInput
    from cheaptune.train.config import build
    from cheaptune.train.guardrails import guard_settings

    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(GOOD_CONFIG))
    _guard_rails_in_range(build(path), "the unedited config")  # not vacuous: the good file is taken
    for field in _config_fields():
        for value in KINDS[kind]:
            edits = [{**GOOD_CONFIG, field: value}]
            if kind == "unknown":
                edits.append({**GOOD_CONFIG, f"{field}_nosuch": 1})  # an unknown key beside the field
            for doc in edits:
                what = f"config {field}: {value!r}"
                path.write_text(yaml.dump(doc, Dumper=DUMPER))
                try:
                    cfg = build(path)
                    guard_settings(cfg)  # train builds the guard's settings before any model loads
                except BadInput as err:
                    _one_line(err, what)
                    continue
                assert kind not in ("nan", "inf"), what  # no non-finite number is ever taken
                assert f"{field}_nosuch" not in doc, what  # nor a key train does not know
                _guard_rails_in_range(cfg, what)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_plan_field_takes_each_value_kind(kind, tmp_path):
    import copy

    from cheaptune.errors import BadInput
    from cheaptune.train.config import build
    from cheaptune.train.guardrails import guard_settings

    good = _good_plan()
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(good))
    _guard_rails_in_range(build(None, path, {"output_dir": str(tmp_path / "o")}), "the unedited plan")
    for at in _paths(good):
        for value in KINDS[kind]:
            for unknown_key in ((False, True) if kind == "unknown" else (False,)):
                doc = copy.deepcopy(good)
                node = doc
                for key in at[:-1]:
                    node = node[key]
                if unknown_key and not isinstance(node, dict):
                    continue
                original = node[at[-1]]
                node[f"{at[-1]}_nosuch" if unknown_key else at[-1]] = value
                what = f"plan {'.'.join(map(str, at))}{'_nosuch' if unknown_key else ''}: {value!r}"
                path.write_text(yaml.dump(doc, Dumper=DUMPER))
                try:  # train --plan's merge reads the file through planfile.load, as launch does
                    cfg = build(None, path, {"output_dir": str(tmp_path / "o")})
                    guard_settings(cfg)
                except BadInput as err:
                    _one_line(err, what)
                    continue
                assert kind not in ("nan", "inf") and not unknown_key, what
                retyped = original is not None and type(value) is not type(original)
                assert not (kind == "wrong-type" and retyped), what  # strict: 'gpu_count: true' is not 1
                assert cfg.gpu_count >= 1, what
                _guard_rails_in_range(cfg, what)
