"""Push an adapter or merged model to the Hugging Face Hub with a model card saying what it cost."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput

_HYPER = ("method", "lora_r", "lora_alpha", "lora_targets", "learning_rate", "num_epochs", "max_steps",
          "sequence_len", "micro_batch_size", "gradient_accumulation_steps", "precision")


def model_card(base: str, run: dict | None, summary: dict | None, merged: bool) -> str:
    """README.md: YAML front matter (base_model, library) and what the run was: data, method, cost, scores."""
    from huggingface_hub import ModelCardData

    # the hub accepts only repo ids as base_model metadata; a local folder is named in the table instead
    hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", base) is not None and not Path(base).exists()
    data = ModelCardData(base_model=base if hub_id else None, library_name="transformers" if merged else "peft",
                         tags=["cheaptune", "lora" if not merged else "merged-lora"])
    cfg = (run or {}).get("config") or {}
    rows = [("base model", base), ("weights", "merged into the base" if merged else "adapter (load with peft)")]
    rows += [("data", ", ".join(d.get("path", "?") for d in cfg.get("datasets", [])) or "-")]
    rows += [(k, cfg[k]) for k in _HYPER if cfg.get(k) is not None]
    for key, label in (("steps", "steps"), ("tokens", "tokens"), ("gpu", "GPU"), ("cost_actual_usd", "cost (USD)"),
                       ("train_loss", "final train loss"), ("eval_loss", "final eval loss")):
        value = (run or {}).get(key, (summary or {}).get(key))
        if value is not None:
            rows.append((label, round(value, 4) if isinstance(value, float) else value))
    scores = latest_eval(run)
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    text = f"---\n{data.to_yaml()}\n---\n\n# Fine-tune of {base}\n\nTrained with cheaptune.\n\n| | |\n|---|---|\n{table}\n"
    if scores:
        text += "\n## Evaluation (tuned vs base)\n\n```json\n" + json.dumps(scores, indent=2) + "\n```\n"
    return text


def latest_eval(run: dict | None) -> dict[str, Any] | None:
    """The scores of the run's last `cheaptune eval` (an 'eval' event in the registry)."""
    events = [e for e in (run or {}).get("events", []) if e["kind"] == "eval"]
    return events[-1]["detail"] if events else None


def push(folder: Path, repo: str, private: bool) -> str:
    """Create the repo if needed and upload the folder; one BadInput line offline or on any hub error."""
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="cheaptune export")
    except Exception as err:  # offline mode, no network, no token, no access
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise BadInput(f"push to the hub failed ({type(err).__name__}: {first}); check the network and "
                       f"`hf auth login`; the files are ready in {folder}") from None
    return str(getattr(info, "commit_url", repo))
