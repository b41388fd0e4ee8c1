"""Whether the user switched the Hugging Face hub off: read at call time, so a test or a user setting the
variable after import is obeyed (huggingface_hub reads its own copy once, when first imported)."""

from __future__ import annotations

import os

_TRUE = ("1", "true", "yes", "on")


def offline(datasets: bool = False) -> bool:
    """HF_HUB_OFFLINE is on; with `datasets`, HF_DATASETS_OFFLINE counts too (the datasets library's switch)."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",)
    return any(os.environ.get(name, "").lower() in _TRUE for name in names)
