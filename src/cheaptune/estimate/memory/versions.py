"""Library versions as estimate inputs: which version-dependent memory mechanisms a run has.

Why: the same trainer holds different memory at different releases (bitsandbytes < 0.43.2 kept every 4-bit
matmul's input, torch < 2.5 ran math SDPA in 16 bits, ...). A profile names the library versions its current
release pins, and older releases' pins (data/profiles.yaml `libraries`, `releases`); `--trainer NAME==X` picks a
release and `--versions lib==X,...` pins libraries. The mechanisms and the releases that changed them live in
data/versions.yaml. A version not known takes the mechanism's heavier side, and the estimate says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.profiles import _profiles, get_profile

DATA = Path(__file__).parents[1] / "data" / "versions.yaml"
SIMULATED = ("torch", "transformers", "peft", "bitsandbytes", "trl")  # what the simulation itself imports


@dataclass(frozen=True)
class Resolved:
    """The mechanisms one request runs with, and why."""

    flags: dict[str, bool]
    libraries: dict[str, str]  # library -> the version or range taken ("" where not known)
    notes: tuple[str, ...]  # one line per mechanism whose version was not known


@cache
def mechanisms() -> dict[str, dict]:
    import yaml

    return yaml.safe_load(DATA.read_text())["mechanisms"]


def known_libraries() -> set[str]:
    return {m["library"] for m in mechanisms().values()} | set(SIMULATED) | {
        p.package for p in _profiles().values() if p.package}


def parse_pins(text: str | None, flag: str = "--versions") -> dict[str, str]:
    """{library: exact version} from 'bitsandbytes==0.42.0,torch==2.1.0'; BadInput naming the bad part."""
    pins: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, sep, ver = part.partition("==")
        name = name.strip().lower()
        try:
            Version(ver.strip())
        except InvalidVersion:
            sep = ""
        if not sep or not name:
            raise BadInput(f"{flag} {part!r} is not LIBRARY==VERSION; write e.g. bitsandbytes==0.42.0,torch==2.1.0")
        if name not in known_libraries():
            raise BadInput(f"{flag}: no memory mechanism depends on {name!r}; libraries read: "
                           f"{', '.join(sorted(known_libraries()))}")
        pins[name] = ver.strip()
    return pins


def split_trainer(trainer: str | None) -> tuple[str | None, str | None]:
    """'litgpt==0.4.9' -> ('litgpt', '0.4.9'); 'litgpt' -> ('litgpt', None)."""
    if trainer is None or "==" not in trainer:
        return trainer, None
    name, ver = (s.strip() for s in trainer.split("==", 1))
    try:
        Version(ver)
    except InvalidVersion:
        raise BadInput(f"--trainer {trainer!r}: {ver!r} is not a version; write e.g. litgpt==0.4.9") from None
    return name, ver


CONFIG_KEYS = ("versions", "trainer")  # the keys any config cheaptune reads takes for these inputs


def config_versions(value: object) -> dict[str, str]:
    """A config's `versions:` mapping {library: version}, checked as --versions is; ValueError naming the key.
    A number is refused, not read: YAML reads 0.10 as 0.1."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"versions must map each library to its version, e.g. versions: {{bitsandbytes: "
                         f"\"0.42.0\"}} (got {value!r})")
    pins: dict[str, str] = {}
    for lib, ver in value.items():
        name = str(lib).strip().lower()
        if name not in known_libraries():
            raise ValueError(f"versions.{lib}: no memory mechanism depends on {lib!r}; libraries read: "
                             f"{', '.join(sorted(known_libraries()))}")
        if not isinstance(ver, str):
            raise ValueError(f"versions.{lib}: {ver!r} is not a version string; write it in quotes, e.g. {lib}: "
                             "\"0.10.0\" (YAML reads 0.10 as the number 0.1)")
        try:
            Version(ver.strip())
        except InvalidVersion:
            raise ValueError(f"versions.{lib}: {ver!r} is not a version; write a release in quotes, e.g. {lib}: "
                             "\"1.2.0\"") from None
        pins[name] = ver.strip()
    return pins


def config_trainer(value: object) -> str | None:
    """A config's `trainer:` (a profile name, NAME==VERSION for a release), checked; ValueError naming the key."""
    if value is None:
        return None
    text = str(value).strip()
    name, _, ver = text.partition("==")
    try:
        prof = get_profile(name)
    except BadInput:
        raise ValueError(f"trainer {value!r} is not a trainer profile; use one of {', '.join(_profiles())} "
                         "(NAME==VERSION for a release, e.g. litgpt==0.4.9)") from None
    try:
        own = Version(ver.strip()) if ver else None
    except InvalidVersion:
        raise ValueError(f"trainer {value!r}: {ver.strip()!r} is not a version; write e.g. litgpt==0.4.9") from None
    if own is not None and not prof.package:
        raise ValueError(f"trainer {value!r}: the {prof.name} profile is what cheaptune runs now; drop ==version")
    return text


def with_origins(flags: dict[str, str], config: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(pins, library -> 'flag' | 'config'): a flag's pin wins over the config's for its library."""
    pins = {**config, **flags}
    return pins, {lib: "flag" if lib in flags else "config" for lib in pins}


def join_pins(pins: dict[str, str]) -> str | None:
    return ",".join(f"{k}=={v}" for k, v in sorted(pins.items())) or None


def installed(lib: str) -> str:
    """The installed version of distribution `lib`; "" when it is not installed."""
    try:
        return metadata.version(lib)
    except metadata.PackageNotFoundError:
        return ""


def library_versions(profile, pins: dict[str, str]) -> dict[str, str]:
    """The version (==X) or range each library has in this run: the pins, else the pins of the trainer
    release named in them, else (its current release) the profile's pins and the installed versions the
    simulation runs. A library with no entry is not known."""
    own = pins.get(profile.package) if profile.package else None
    out: dict[str, str] = {}
    if own is None:
        out.update({lib: f"=={installed(lib)}" for lib in SIMULATED if installed(lib)})
        out.update(profile.libraries)
        if profile.release:
            out[profile.package] = f"=={profile.release}"
    else:
        out.update(next((r["libraries"] for r in profile.releases  # a dev build counts as its release
                         if SpecifierSet(r["versions"]).contains(Version(own), prereleases=True)), {}))
    out.update({lib: f"=={v}" for lib, v in pins.items()})
    return out


def _side(spec: str, boundary: str) -> str | None:
    """'before' when every version `spec` allows is before `boundary`, 'after' when none is, else None."""
    if not spec:
        return None
    try:
        specs = SpecifierSet(spec)
    except InvalidSpecifier:
        return None
    b = Version(boundary)
    lows = [Version(s.version) for s in specs if s.operator in ("==", ">=", ">", "~=", "===")]
    highs = [(Version(s.version), s.operator) for s in specs if s.operator in ("==", "<=", "<", "===")]
    if any(v < b or (v == b and op == "<") for v, op in highs):
        return "before"
    if any(v >= b for v in lows):
        return "after"
    return None


def resolve(trainer: str, pins_text: str | None, method: str) -> Resolved:
    """The mechanisms a `trainer` profile run of `method` has at the pinned versions (pins include the
    trainer's own version)."""
    return _resolve(trainer, pins_text or "", method)


@cache
def _resolve(trainer: str, pins_text: str, method: str) -> Resolved:
    prof = get_profile(trainer)
    libs = library_versions(prof, parse_pins(pins_text))
    flags, notes = {}, []
    for name, m in mechanisms().items():
        if (m.get("trainers") and prof.name not in m["trainers"]) or (m.get("methods") and method not in m["methods"]):
            flags[name] = False
            continue
        spec = libs.get(m["library"], "")
        on = _side(spec, str(m["on_before"])) == "before"
        off = _side(spec, str(m.get("off_from", m["on_before"]))) == "after"
        if on or off:
            flags[name] = on
            continue
        flags[name] = bool(m["heavier"])
        notes.append(f"{m['library']} version not known ({spec or 'no pin'}): {m['about']} before "
                     f"{m['on_before']}; the heavier side taken ({'yes' if m['heavier'] else 'no'})")
    return Resolved(flags, {k: v for k, v in libs.items() if v}, tuple(notes))
