"""A price file resolves one GPU name per row: the name index is built once per catalog file version, not per
row (146 rebuilds were a third of a warm plan's time)."""

from __future__ import annotations

from cheaptune.catalog import gpus


def test_the_name_index_is_built_once_for_many_names(monkeypatch):
    built = []
    real = gpus._index

    def counting(specs):
        built.append(len(specs))
        return real(specs)

    monkeypatch.setattr(gpus, "_index", counting)
    gpus._index_version.cache_clear()
    names = [gpus.normalize_gpu_name(n) for n in ("H100", "A100 80GB", "RTX 4090", "T4", "nosuch") * 20]
    assert len(built) == 1
    assert names[:5] == ["H100", "A100-80GB", "RTX4090", "T4", None]
