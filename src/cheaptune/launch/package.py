"""Which cheaptune the rented machine installs: the same one that planned the run.

Run from a source checkout (editable or local-folder install), the package is built into a wheel that
travels with the task, so the machine runs this code, unreleased changes included. Installed from a
package index, that index has this version: the machine installs `cheaptune==VERSION`. A wheel file we
were installed from is shipped as it is. `--install` / `--index-url` choose otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import cheaptune
from cheaptune.errors import BadInput, CheaptuneError
from cheaptune.util import atomic
from cheaptune.util.paths import cache_dir

DIST = "cheaptune"
# What a wheel is built from; anything else in a checkout (tests, bench, .venv) stays behind.
_SOURCE_ITEMS = ("pyproject.toml", "README.md", "LICENSE", "src")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Package:
    """A pip requirement for the machine, and the local file to upload for it (None: from an index)."""

    spec: str
    local: Path | None = None


def _origin() -> tuple[str, Path | None]:
    """('source', project dir) | ('wheel', file) | ('index', None): where the running cheaptune came from."""
    try:
        dist = metadata.distribution(DIST)
        raw = dist.read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        raw = None
    if raw:
        info = json.loads(raw)
        url = urlparse(info.get("url", ""))
        path = Path(unquote(url.path)) if url.scheme == "file" else None
        if path is not None and "dir_info" in info and (path / "pyproject.toml").is_file():
            return "source", path
        if path is not None and path.suffix == ".whl" and path.is_file():
            return "wheel", path
    # Not installed at all: running from a source tree on sys.path (src/cheaptune).
    tree = Path(cheaptune.__file__).resolve().parents[2]
    if raw is None and (tree / "pyproject.toml").is_file():
        return "source", tree
    return "index", None


def _fingerprint(project: Path) -> str:
    """Hash of every file a wheel is built from (path, size, mtime): a changed file means a new wheel."""
    h = hashlib.sha256()
    for item in _SOURCE_ITEMS:
        base = project / item
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc" or any(x.endswith(".egg-info") for x in f.parts):
                continue
            st = f.stat()
            h.update(f"{f.relative_to(project)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def build_wheel(project: Path) -> Path:
    """A wheel of the project, cached on disk by the source's fingerprint and once per process (one
    command builds it once however many tasks it writes)."""
    wheel = _build_once(project)
    if not wheel.is_file():  # the cache folder was cleaned meanwhile
        _build_once.cache_clear()
        wheel = _build_once(project)
    return wheel


@functools.cache
def _build_once(project: Path) -> Path:
    """Build with pip and the project's own backend from a copy (the checkout gets no build/ or
    egg-info folders), without build isolation (nothing downloaded: setuptools is installed here)."""
    out = cache_dir("wheels") / _fingerprint(project)
    found = sorted(out.glob(f"{DIST}-*.whl"))
    if found:
        return found[-1]
    with tempfile.TemporaryDirectory(prefix="cheaptune-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for item in _SOURCE_ITEMS:
            if (project / item).is_dir():
                shutil.copytree(project / item, src / item, ignore=_SKIP)
            elif (project / item).is_file():
                shutil.copy2(project / item, src / item)
        built = Path(tmp) / "dist"
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(built), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        wheels = sorted(built.glob(f"{DIST}-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel written"]
            raise CheaptuneError(f"could not build a cheaptune wheel from {project} ({last[0]}); "
                                 "pass --install with a pip spec or a wheel instead")
        atomic.write_bytes(out / wheels[0].name, wheels[0].read_bytes())
    return out / wheels[0].name


def package(extras: tuple[str, ...], install: str | None = None) -> Package:
    """The requirement the machine installs, with `extras` (e.g. qlora) appended where pip allows."""
    tag = f"[{','.join(extras)}]" if extras else ""
    if install:
        local = Path(install).expanduser()
        if not any(ch in install for ch in "=<>[@") and local.exists():
            local = local.resolve()
            if local.is_dir():
                if not (local / "pyproject.toml").is_file():
                    raise BadInput(f"--install {install}: a folder must be a cheaptune checkout (with pyproject.toml)")
                local = build_wheel(local)
            elif local.suffix != ".whl":
                raise BadInput(f"--install {install}: a local file must be a wheel (.whl)")
            return Package(local.name + tag, local)
        return Package(install)
    kind, path = _origin()
    if kind == "source":
        path = build_wheel(path)  # type: ignore[arg-type]
    if kind in ("source", "wheel"):
        return Package(path.name + tag, path)  # type: ignore[union-attr]
    return Package(f"{DIST}{tag}=={cheaptune.__version__}")
