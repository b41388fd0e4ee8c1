"""GPU catalog: specs from data/gpus.yaml and one canonical name for every provider's spelling.

Price sources spell the same board many ways ("RTX4090", "RTX_4090", "NVIDIA GeForce RTX 4090",
"A100-SXM4-80GB"); the planner joins offers to specs on the canonical name, so every importer goes
through `normalize_gpu_name`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cheaptune.catalog import DATA_DIR, ReadDate, SourceDate, file_version, load_rows
from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean

GPUS_FILE = DATA_DIR / "gpus.yaml"
GIB = 1024**3

# Words providers add that do not change which board it is.
_NOISE = ("nvidia", "geforce", "tesla", "quadro", "amd", "instinct", "generation", "tensorcore", "gpu")
_MEMORY = re.compile(r"(?:^|[^a-z0-9])(\d+)\s*gi?b(?![a-z])")
_FORM = re.compile(r"sxm\d?|pcie|nvl|hbm\d?e?|mega")


class GpuSpec(BaseModel):
    """One board's facts (dense peaks, no sparsity); see the header of data/gpus.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    vendor: Literal["nvidia", "amd"]
    cuda: bool = True
    bnb_4bit: bool = True
    bnb_4bit_source: str = ""  # where a non-CUDA board's bitsandbytes 4-bit support is stated
    memory_gib: float = Field(gt=0)
    arch: str
    compute_capability: str | None = Field(pattern=r"^\d+\.\d+$")
    bf16: bool
    bf16_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    mem_bw_gbs: float = Field(gt=0)
    tier: Literal["consumer", "professional", "datacenter"]
    interconnect: Literal["pcie", "nvlink", "sxm"]
    source: str = Field(pattern=r"^https?://")
    source_date: SourceDate
    read: ReadDate
    checked: str
    # Figures no source that was read gives (kept so the estimators can run; `cheaptune gpus` lists them).
    assumed: tuple[Literal["memory_gib", "bf16_tflops", "fp16_tflops", "fp32_tflops", "mem_bw_gbs"], ...] = ()

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    def peak_tflops(self, precision: str = "bf16") -> float:
        """Dense tensor peak for a training precision; bf16 on a board without it runs at fp16 speed."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "bf16" and self.bf16 and self.bf16_tflops:
            return self.bf16_tflops
        return self.fp16_tflops


def _compact(raw: str) -> str:
    s = re.sub(r"[^a-z0-9]", "", raw.lower())
    for word in _NOISE:
        s = s.replace(word, "")
    return s


def _parse(raw: str) -> tuple[str, int | None, str | None]:
    """(board key, memory in GB if named, form factor if named) from any spelling."""
    low = raw.lower()
    mem = _MEMORY.search(low)
    s = _compact(_MEMORY.sub(" ", low))
    forms = [f for f in _FORM.findall(s) if f in ("pcie", "nvl") or f.startswith("sxm")]
    s = _FORM.sub("", s)
    form = "sxm" if forms and forms[0].startswith("sxm") else (forms[0] if forms else None)
    return s, int(mem.group(1)) if mem else None, form


def _load(path: Path) -> tuple[GpuSpec, ...]:
    return _load_version(path, file_version(path))


@lru_cache(maxsize=8)
def _load_version(path: Path, version: tuple[int, int]) -> tuple[GpuSpec, ...]:
    specs = load_rows(path, "gpus", GpuSpec, "name")
    names = [s.name for s in specs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise BadInput(f"{path}: GPU names must be unique; repeated: {', '.join(sorted(dupes))}")
    return tuple(specs)


def list_gpus(path: Path | None = None) -> list[GpuSpec]:
    """Every GPU in the catalog, in file order (roughly oldest and smallest first)."""
    return list(_load(Path(path or GPUS_FILE)))


@lru_cache(maxsize=8)
def _index_version(path: Path, version: tuple[int, int]) -> tuple[dict[str, str], dict[str, list[GpuSpec]]]:
    """The name index of one version of the file, built once (a price file resolves a name per row)."""
    return _index(_load_version(path, version))


def _index(specs: tuple[GpuSpec, ...]) -> tuple[dict[str, str], dict[str, list[GpuSpec]]]:
    exact: dict[str, str] = {}
    by_key: dict[str, list[GpuSpec]] = {}
    for spec in specs:
        for alias in (spec.name, *spec.aliases):
            exact.setdefault(_compact(alias), spec.name)
        by_key.setdefault(_parse(spec.name)[0], []).append(spec)
    return exact, by_key


def normalize_gpu_name(raw: str, memory_gib: float | None = None, path: Path | None = None) -> str | None:
    """Canonical name for a provider's spelling, or None when the board is not in the catalog.

    `memory_gib` (e.g. from a price file's per-GPU memory) picks among boards sold under one name,
    such as Vast's "H100" with 94 GiB (H100-NVL) or Cudo's "A100" with 80 GiB (A100-80GB).
    """
    if not raw or not raw.strip():
        return None
    file = Path(path or GPUS_FILE)
    exact, by_key = _index_version(file, file_version(file))
    key, mem, form = _parse(raw)
    candidates = by_key.get(key, [])
    if memory_gib is None and mem is None and form is None and _compact(raw) in exact:
        return exact[_compact(raw)]
    if not candidates:  # an alias, possibly with a form word added ("A6000 PCIe")
        return exact.get(_compact(raw)) or exact.get(key)
    want = memory_gib if memory_gib is not None else mem
    if want is not None and len(candidates) > 1:
        best = min(abs(c.memory_gib - want) for c in candidates)
        candidates = [c for c in candidates if abs(c.memory_gib - want) - best < 1.0]
    if form is not None and len(candidates) > 1:
        matching = [c for c in candidates if c.interconnect == form or (form == "nvl" and c.name.endswith("NVL"))]
        candidates = matching or candidates
    # Still several (e.g. "H100" with 80 GB): the board whose canonical name carries no qualifier.
    plain = [c for c in candidates if "-" not in c.name]
    return (plain or candidates)[0].name


def resolve_gpu(name: str, path: Path | None = None) -> GpuSpec:
    """The spec for any spelling; unknown names are BadInput with the closest catalog names."""
    specs = _load(Path(path or GPUS_FILE))
    canonical = normalize_gpu_name(name, path=path)
    for spec in specs:
        if spec.name == canonical:
            return spec
    hint = did_you_mean(name, [s.name for s in specs]) or "; run `cheaptune gpus` for the list"
    raise BadInput(f"unknown GPU {name!r}{hint}")
