"""Plan files for the dashboard: found in the folders and files given, each shown as `plan --markdown` shows it.

Two forms are read: the YAML `plan --save` writes (the chosen offer and its failover alternatives) and
the JSON `plan --json` prints (every ranked option and the why-not list). Other files in a folder are
skipped; a file that is a plan but does not load shows its one-line error on its own page.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput
from cheaptune.plan import planfile, render

SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 5_000_000  # a plan is a few KiB; larger files in a folder are not plans
MAX_FILES = 500


@dataclass(frozen=True)
class PlanRef:
    id: str
    path: Path


def find_plans(paths: list[Path]) -> list[PlanRef]:
    """Plan files among `paths` (files, or folders scanned one level deep), with ids stable per path."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())[:MAX_FILES]
        elif p.is_file():
            files.append(p)
    refs = [PlanRef(hashlib.sha256(str(f.resolve()).encode()).hexdigest()[:12], f) for f in files]
    return [r for r in refs if r.path in paths or _looks_like_plan(r.path)]


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def _looks_like_plan(path: Path) -> bool:
    try:
        if path.stat().st_size > MAX_BYTES:
            return False
        doc = _read(path)
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and ({"offer", "prediction"} <= set(doc) or {"options", "workload"} <= set(doc))


def plan_page(ref: PlanRef) -> dict[str, Any]:
    """The page of one plan: title, table (HEADERS and rows), prose sections, chart bars; or `problem`."""
    base: dict[str, Any] = {"id": ref.id, "path": str(ref.path)}
    try:
        doc = _read(ref.path)
    except (OSError, ValueError, yaml.YAMLError) as err:
        return {**base, "problem": f"plan file {ref.path} cannot be read ({type(err).__name__}: {err})"}
    try:
        if isinstance(doc, dict) and "options" in doc:
            return {**base, **_from_json(doc)}
        return {**base, **_from_planfile(planfile.load(ref.path))}
    except BadInput as err:
        return {**base, "problem": str(err)}
    except (KeyError, TypeError, ValueError) as err:
        return {**base, "problem": f"plan file {ref.path} is not a complete `plan --json` document "
                                   f"({type(err).__name__}: {err}); save it again with `cheaptune plan ... --json`"}


def _from_json(doc: dict) -> dict[str, Any]:
    options = doc["options"]
    sections = render.text_sections(doc)
    return {
        "title": sections[0][1][0], "headers": render.HEADERS, "rows": [render.row_cells(o) for o in options],
        "sections": [(name, lines) for name, lines in sections[1:] if lines],
        "bars": [_bar(f"{i + 1}. {o['hardware']} {o['provider']}", o["cost"]) for i, o in enumerate(options)],
    }


def _from_planfile(p: planfile.PlanFile) -> dict[str, Any]:
    best, cost = p.offer, p.prediction.cost
    rows = [_offer_cells("recommended", best, cost.total)]
    rows += [_offer_cells(f"alternative {i + 1}", o, o.total_cost) for i, o in enumerate(p.alternatives)]
    bars = [_bar(f"recommended: {best.gpu} x{best.gpu_count} {best.provider}", cost.model_dump())]
    bars += [{"label": f"alt {i + 1}: {o.gpu} x{o.gpu_count} {o.provider}", "unsplit": o.total_cost or 0.0}
             for i, o in enumerate(p.alternatives)]
    return {
        "title": f"{p.model_label or p.model}: {p.train.method} on {best.gpu} x{best.gpu_count}, "
                 f"{p.prediction.hours:.2f} h, {p.prediction.tokens:,} tokens/epoch",
        "headers": ["", "provider/region", "GPU", "pricing", "$/hour", "$ total"], "rows": rows,
        "sections": [("Saved plan file", [
            "a saved plan keeps the chosen offer and its failover alternatives; `cheaptune plan ... --json > "
            "plan.json` keeps every ranked option and why the others lost"])],
        "bars": bars,
    }


def _offer_cells(label: str, o: planfile.Offer, total: float | None) -> list[str]:
    return [label, f"{o.provider}/{o.region}", f"{o.gpu} x{o.gpu_count}", "spot" if o.spot else o.kind,
            f"{o.price_per_hour:.2f}", "-" if total is None else f"{total:.2f}"]


def _bar(label: str, cost: dict) -> dict[str, Any]:
    """One option's $ split the way the plan table splits it: compute, storage+egress, spot loss."""
    return {"label": label, "compute": cost["compute"], "storage_egress": cost["storage"] + cost["egress"],
            "spot_loss": cost["spot_overhead"]}
