"""Which training kernels (FlashAttention-2, Liger) exist for a GPU's architecture (data/kernels.yaml).

A plan only counts a kernel where its own project says it runs; `None` means the source does not say.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cheaptune.catalog import DATA_DIR, ReadDate, SourceDate, SourceRef, file_version, load_rows
from cheaptune.errors import BadInput

KERNELS_FILE = DATA_DIR / "kernels.yaml"


class KernelSupport(BaseModel):
    arch: str
    flash_attn: bool | None
    liger: bool | None
    source: SourceRef
    source_date: SourceDate
    read: ReadDate


@functools.lru_cache(maxsize=4)
def _table(path: Path, version: tuple[int, int]) -> dict[str, KernelSupport]:
    return {r.arch: r for r in load_rows(path, "kernels", KernelSupport, "arch")}


def for_gpu(gpu: Any, path: Path = KERNELS_FILE) -> KernelSupport:
    """The kernel support of a GPU spec's architecture; an architecture missing from the file is BadInput."""
    table = _table(Path(path), file_version(path))
    if gpu.arch not in table:
        raise BadInput(f"{path}: no kernel row for architecture {gpu.arch!r} (GPU {gpu.name}); add one")
    return table[gpu.arch]
