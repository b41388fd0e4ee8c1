"""What an export or eval starts from: a run (registry id or name) or an adapter folder, and its base."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cheaptune.errors import BadInput


@dataclass
class Source:
    adapter_dir: Path
    base: str  # as the adapter or --base names it
    base_dir: Path  # a local folder with the base's files
    run: dict | None  # the registry record when the source is a run
    adapter_config: dict


def local_model_dir(name: str) -> Path:
    """A local folder for a model: the path itself, or its files in the Hugging Face cache (downloaded
    when online); BadInput naming the fix otherwise."""
    if Path(name).is_dir():
        return Path(name)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"]))
    except Exception as err:  # offline and not cached, unknown repo, no access
        raise BadInput(f"base model {name!r} is not a local folder and could not be fetched "
                       f"({type(err).__name__}); pass --base with the base model's folder") from None


def resolve_source(ref: str, base: str | None = None) -> Source:
    """`ref` is an adapter folder or a run id/prefix/name; `base` overrides the adapter's recorded base."""
    run = None
    folder = Path(ref)
    if not (folder / "adapter_config.json").is_file():
        if folder.is_dir():
            raise BadInput(f"{ref} has no adapter_config.json; pass a run id or a folder with a saved adapter")
        from cheaptune.runs.registry import Registry

        run = Registry().get_run(ref)
        folder = Path(run.get("output_dir") or "")
        if not (folder / "adapter_config.json").is_file():
            raise BadInput(f"run {run['id']} left no adapter in {folder} (full fine-tunes and unfinished runs "
                           "have none); pass the folder of a saved adapter")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    name = base or cfg.get("base_model_name_or_path") or (run or {}).get("model")
    if not name:
        raise BadInput(f"{folder}/adapter_config.json names no base model; pass --base")
    return Source(folder, name, local_model_dir(name), run, cfg)
