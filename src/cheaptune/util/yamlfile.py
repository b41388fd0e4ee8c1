"""Reading a user's YAML mapping (a training config, a plan file) with one-line errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput
from cheaptune.util.files import read_text


def read_mapping(path: str | Path, what: str, fix: str) -> dict[str, Any]:
    """The YAML file at `path` as a dict (empty file: {}); `what` names it, `fix` says how to get a good one."""
    p = Path(path)
    text = read_text(p, what, fix, allow_empty=True)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise BadInput(f"{what} {p}{line} is not valid YAML; fix the syntax there") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInput(f"{what} {p} must be a YAML mapping of keys to values; {fix}")
    return raw


DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")


def beside_config(value: str, config: str | Path) -> str:
    """A relative path a config names, read from the config file's folder (where its author wrote it) when
    it is there; otherwise as written (a path from the working folder, or a hub dataset id)."""
    p = Path(str(value)).expanduser()
    if p.is_absolute():
        return str(p)
    there = Path(config).parent / p
    return str(there) if there.exists() else str(value)


def with_config_paths(raw: dict[str, Any], config: str | Path) -> dict[str, Any]:
    """`raw` with each `datasets[].path` and `eval_data` read from the config's folder (beside_config): every
    command that reads a config (train, doctor, plan --config, launch --config) finds the same files from any
    folder. Outputs (output_dir, checkpoint_dir) stay relative to the working folder, as Axolotl's do."""
    raw = with_reward_files(raw, lambda item: beside_config(item, config))
    if isinstance(raw.get("eval_data"), str) and raw["eval_data"]:
        raw = {**raw, "eval_data": beside_config(raw["eval_data"], config)}
    entries = raw.get("datasets")
    if not isinstance(entries, list):
        return raw
    fixed = [{**e, "path": beside_config(e["path"], config)} if isinstance(e, dict) and isinstance(e.get("path"), str)
             and e["path"] else e for e in entries]
    return {**raw, "datasets": fixed}


def with_reward_files(raw: dict[str, Any], path_of: Callable[[str], str]) -> dict[str, Any]:
    """`raw` with each of GRPO's reward files (`reward: x.py`, or list items naming one) mapped by `path_of`:
    read from the config's folder (with_config_paths), or uploaded to the machine (launch.stage)."""
    def fix(item: Any) -> Any:
        if isinstance(item, str) and item.endswith(".py"):
            return path_of(item)
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            return {**item, "name": fix(item["name"])}
        return item

    reward = raw.get("reward")
    if reward is None:
        return raw
    return {**raw, "reward": [fix(x) for x in reward] if isinstance(reward, list) else fix(reward)}


def looks_local(value: str) -> bool:
    """A dataset a config names as a file (a data suffix, or ./ ../ / ~), not a hub id."""
    return str(value).lower().endswith(DATA_SUFFIXES) or str(value).startswith((".", "/", "~"))
