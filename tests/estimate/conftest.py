"""Small model configs for the estimator tests (no weights needed: the estimator reads configs)."""

from __future__ import annotations

import dataclasses

import pytest

from cheaptune.estimate.memory.memory import EstimateRequest, normalize


@pytest.fixture
def tiny_cfg():
    from cheaptune.demo.tiny import tiny_llama_config

    return tiny_llama_config(512)


def smollm2_like(layers: int = 2):
    """SmolLM2-135M's shape (HuggingFaceTB/SmolLM2-135M config.json) with fewer blocks."""
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                       num_hidden_layers=layers, vocab_size=49152, max_position_embeddings=8192,
                       tie_word_embeddings=True)


def request(cfg, **kw) -> EstimateRequest:
    """A normalized request (defaults filled) for the simulator functions."""
    base = dict(model=cfg.to_dict(), method="full", micro_batch=2, seq_len=64)
    base.update(kw)
    return normalize(EstimateRequest(**base), base["model"])


@pytest.fixture
def make_request():
    return request


def replace(req, **kw):
    return dataclasses.replace(req, **kw)
