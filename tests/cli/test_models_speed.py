"""`cheaptune models` builds a transformers config (importing torch, ~4 s) only the first time a catalog
entry leaves its context out (falcon); after that the default is read from cheaptune's cache."""

from __future__ import annotations

from cheaptune.catalog import models


def test_a_missing_context_is_built_once_then_read_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path))
    falcon = next(s for s in models.list_models() if s.id == "tiiuae/falcon-7b")
    assert "max_position_embeddings" not in falcon.config
    built = []
    real = models.to_hf_config

    def counting(spec, **kw):
        built.append(spec.id)
        return real(spec, **kw)

    monkeypatch.setattr(models, "to_hf_config", counting)
    first = falcon.context_length
    assert first == real(falcon).max_position_embeddings and built == ["tiiuae/falcon-7b"]
    assert falcon.context_length == first and len(built) == 1  # the second read builds nothing
    assert any((tmp_path).rglob("falcon-*.json"))
