"""Check what an export wrote: reload it and run one forward pass (finite logits), when RAM allows."""

from __future__ import annotations

from pathlib import Path

from cheaptune.errors import BadInput

PROMPT = "Hello, how are you?"


def _weights_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def fits_in_ram(*folders: Path, fraction: float = 0.5) -> bool:
    """Whether loading these folders' weights takes at most `fraction` of the available memory."""
    import psutil

    return sum(_weights_bytes(f) for f in folders) <= fraction * psutil.virtual_memory().available


def forward_check(model_dir: Path, adapter_dir: Path | None = None, tokenizer_dir: Path | None = None) -> float:
    """Load the model (plus adapter), one forward pass on a short prompt; returns the mean logit.

    BadInput when it does not load or gives non-finite logits: the export is then left unpublished."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="auto", use_safetensors=True)
        if adapter_dir is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter_dir))
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir or adapter_dir or model_dir))
    except (OSError, ValueError, RuntimeError) as err:
        raise BadInput(f"the export does not load ({str(err).splitlines()[0]}); nothing was published") from None
    ids = tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    if not torch.isfinite(logits).all():
        raise BadInput("the exported model gives non-finite logits; nothing was published")
    return float(logits.float().mean())
