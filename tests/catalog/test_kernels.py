"""Kernel support per architecture: every catalog GPU has a sourced row; AMD and old boards as the sources say."""

from __future__ import annotations

import pytest

from cheaptune.catalog.gpus import list_gpus, resolve_gpu
from cheaptune.catalog.kernels import for_gpu
from cheaptune.errors import BadInput


def test_every_catalog_gpu_has_a_sourced_kernel_row():
    for g in list_gpus():
        k = for_gpu(g)
        assert "flash-attention@" in k.source and "Liger-Kernel@" in k.source, g.name


@pytest.mark.parametrize(("gpu", "flash_attn", "liger"), [
    ("MI300X", True, True),  # FlashAttention-2 ROCm: MI200 or MI300; Triton on ROCm 6.2+
    ("MI355X", None, True),  # CDNA4 is not in the FlashAttention README read
    ("T4", False, False),  # Turing: FlashAttention 1.x only; Triton needs compute capability 8.0+
    ("H100", True, True),
    ("B200", None, True),
])
def test_support_follows_the_sources(gpu, flash_attn, liger):
    k = for_gpu(resolve_gpu(gpu))
    assert (k.flash_attn, k.liger) == (flash_attn, liger)


def test_an_architecture_without_a_row_is_one_line(tmp_path):
    from types import SimpleNamespace

    with pytest.raises(BadInput, match="no kernel row for architecture 'rdna9'"):
        for_gpu(SimpleNamespace(arch="rdna9", name="X"))
