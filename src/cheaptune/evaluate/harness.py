"""lm-evaluation-harness tasks (an optional extra) on the base and the tuned model, side by side.

The harness does the work (task definitions, prompting, metrics); we run it twice through its Hugging
Face backend, once on the base and once with the adapter (`peft=`), and pair the numbers up.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.export.source import Source
from cheaptune.util.names import did_you_mean


def run_tasks(src: Source, tasks: list[str], tasks_dir: str | None = None, limit: int | None = None,
              batch_size: int = 8) -> dict[str, dict[str, dict[str, float]]]:
    """{task: {"base": {metric: value}, "tuned": {...}}}; `tasks_dir` holds task YAMLs of your own
    (then only those are indexed: the built-in tasks download their data from the hub)."""
    if importlib.util.find_spec("lm_eval") is None:
        raise BadInput("--tasks needs lm-evaluation-harness: pip install 'cheaptune[harness]'")
    import lm_eval
    import torch
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=tasks_dir, include_defaults=tasks_dir is None)
    for task in tasks:
        if task not in manager.all_tasks:
            raise BadInput(f"unknown lm-eval task {task!r}{did_you_mean(task, manager.all_tasks)}; "
                           "`lm-eval ls tasks` lists them, --tasks-dir adds your own")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = {"pretrained": str(src.base_dir), "device": device}
    out: dict[str, dict[str, dict[str, float]]] = {t: {} for t in tasks}
    for side, extra in (("base", {}), ("tuned", {"peft": str(src.adapter_dir)})):
        res = lm_eval.simple_evaluate(model="hf", model_args={**args, **extra}, tasks=tasks, task_manager=manager,
                                      batch_size=batch_size, limit=limit)
        for task, metrics in res["results"].items():
            out.setdefault(task, {})[side] = _numbers(metrics)
    return out


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """'acc,none' -> 'acc'; standard errors and labels dropped."""
    return {k.split(",")[0]: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and "stderr" not in k and k != "sample_len"}
