"""A parameter count that needs the model built on meta (a family count_params has no formula for) is built once
and then read from disk: `models` lists Qwen3, Gemma 3 and gpt-oss without importing torch every time."""

from __future__ import annotations


def test_meta_count_is_built_once_then_read(monkeypatch, tmp_path):
    import transformers

    from cheaptune.catalog.models import count_params, resolve_model

    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path))
    config = resolve_model("Qwen/Qwen3-0.6B").config
    first = count_params(config)
    assert list((tmp_path / "cache" / "params").glob("*.json"))

    def no_build(*_a, **_k):
        raise AssertionError("built again")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", no_build)
    assert count_params(config) == first > 400_000_000  # Qwen3-0.6B: 0.6B with its tied embedding
