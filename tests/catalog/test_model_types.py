"""Every shipped catalog entry names a model_type the installed transformers knows (no model is built).

A model_type transformers lacks would fail only when a user plans or trains it; `train` loads with
AutoModelForCausalLM and the estimator builds the same class, so the type must map to a causal-LM class too.
"""

from __future__ import annotations

import dataclasses

import pytest
from transformers import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from cheaptune.catalog.models import MODELS_FILE, list_models

SPECS = list_models(path=MODELS_FILE)


def unknown_types(specs) -> list[str]:
    """'<id>: <model_type> (<what is missing>)' for each entry the installed transformers cannot build."""
    bad = []
    for s in specs:
        mt = s.config.get("model_type")
        if mt not in CONFIG_MAPPING:
            bad.append(f"{s.id}: {mt!r} (no config class)")
        elif mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            bad.append(f"{s.id}: {mt!r} (no AutoModelForCausalLM class)")
    return bad


def test_shipped_catalog_has_entries():
    assert len(SPECS) >= 60  # the whole file was read, not an empty or user catalog


def test_every_model_type_is_known_to_transformers():
    assert unknown_types(SPECS) == []


@pytest.mark.parametrize(("model_type", "why"), [("no_such_arch", "no config class"),
                                                 ("clip_vision_model", "no AutoModelForCausalLM class")])
def test_an_unknown_type_is_named(model_type, why):
    """The check is not vacuous: a type transformers lacks, or one with no causal-LM head, is reported by entry."""
    spec = dataclasses.replace(SPECS[0], config=dict(SPECS[0].config, model_type=model_type))
    assert unknown_types([spec]) == [f"{SPECS[0].id}: {model_type!r} ({why})"]
