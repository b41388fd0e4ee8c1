"""`cheaptune export` as a library call: resolve the run -> write into a temporary folder -> verify -> rename.

A reader sees the previous export or the new one, never half of one; an existing export is replaced
only with force. Verification reloads what was written and runs one forward pass when it fits in half
the free RAM (always on the tiny test model); otherwise it says it skipped.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.export import hub, serve, verify
from cheaptune.export.merge import copy_side_files, merge_shards, set_config_dtype
from cheaptune.export.source import Source, resolve_source
from cheaptune.util.atomic import atomic_dir

KINDS = ("merged", "ollama", "vllm", "hub", "gguf")
MERGED_DTYPE = "bfloat16"  # "merged 16-bit": an fp32 base (the demo's) is cast; bf16 keeps fp32's range
_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass
class ExportResult:
    kind: str
    path: Path
    verified: str  # "reload + forward pass" | why it was skipped
    details: dict[str, Any] = field(default_factory=dict)


def export(ref: str, to: str, out: str | Path | None = None, *, force: bool = False, base: str | None = None,
           repo: str | None = None, private: bool = True, merged: bool = False) -> ExportResult:
    if to not in KINDS:
        raise BadInput(f"--to must be one of {', '.join(KINDS)} (got {to!r})")
    if to == "hub" and not repo:
        raise BadInput("--to hub needs --repo OWNER/NAME")
    src = resolve_source(ref, base)
    target = Path(out) if out else src.adapter_dir / "export" / to
    if target.exists() and not force:
        raise BadInput(f"{target} exists; pass --force to replace it, or --out for another folder")
    with atomic_dir(target) as tmp:
        details, checked = _WRITERS[to](src, tmp, repo=repo, merged=merged, target=target)
    result = ExportResult(to, target, checked, details)
    if to == "hub":
        result.details["url"] = hub.push(target, repo or "", private)
    return result


def _check(model_dir: Path, adapter_dir: Path | None = None) -> str:
    folders = (model_dir,) if adapter_dir is None else (model_dir, adapter_dir)
    if not verify.fits_in_ram(*folders):
        return "skipped the reload check: the weights are over half the free RAM"
    verify.forward_check(model_dir, adapter_dir)
    return "reload + forward pass"


def _merged(src: Source, tmp: Path, **_: Any) -> tuple[dict, str]:
    details = merge_shards(src.base_dir, src.adapter_dir, tmp, cast=MERGED_DTYPE)
    copy_side_files(src.base_dir, src.adapter_dir, tmp)
    if details["dtypes"] == [MERGED_DTYPE]:
        set_config_dtype(tmp, MERGED_DTYPE)
    return details, _check(tmp)


def _ollama(src: Source, tmp: Path, *, target: Path, **_: Any) -> tuple[dict, str]:
    (tmp / "Modelfile").write_text(serve.ollama_modelfile(src.base_dir, src.adapter_dir))
    # the folder it will be renamed to, not the temporary one it is written in
    return {"run": f"ollama create NAME -f {target / 'Modelfile'}"}, _check(src.base_dir, src.adapter_dir)


def _vllm(src: Source, tmp: Path, **_: Any) -> tuple[dict, str]:
    name = (src.run or {}).get("name") or src.adapter_dir.resolve().name
    for fname, text in serve.vllm_files(src.base, src.adapter_dir, int(src.adapter_config.get("r", 8)), name).items():
        (tmp / fname).write_text(text)
        (tmp / fname).chmod(0o755)
    return {"model": name}, _check(src.base_dir, src.adapter_dir)


def _hub(src: Source, tmp: Path, *, merged: bool = False, **_: Any) -> tuple[dict, str]:
    if merged:
        details, checked = _merged(src, tmp)
    else:
        for name in _ADAPTER_FILES:
            shutil.copy2(src.adapter_dir / name, tmp / name)
        copy_side_files(src.adapter_dir, src.adapter_dir, tmp)
        details, checked = {}, _check(src.base_dir, tmp)
    summary_file = src.adapter_dir / "training_summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    (tmp / "README.md").write_text(hub.model_card(src.base, src.run, summary, merged))
    return details, checked


def _gguf(src: Source, tmp: Path, **_: Any) -> tuple[dict, str]:
    if serve.find_gguf_converter() is None:
        serve.convert_gguf(tmp, tmp / "model.gguf")  # raises the how-to-get-it line before any work
    merged_dir = tmp / "merged"
    merged_dir.mkdir()
    details, checked = _merged(src, merged_dir)
    serve.convert_gguf(merged_dir, tmp / "model-f16.gguf")
    shutil.rmtree(merged_dir)
    return details, checked


_WRITERS = {"merged": _merged, "ollama": _ollama, "vllm": _vllm, "hub": _hub, "gguf": _gguf}
