"""Facts about models, GPUs and prices, loaded from versioned data files with sources and dates.

`load_rows` is shared by the catalogs: a malformed row becomes ONE BadInput line naming the file,
the entry and the field, so a user editing a data file sees exactly what to fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from cheaptune.errors import BadInput

DATA_DIR = Path(__file__).parent / "data"

M = TypeVar("M", bound=BaseModel)

# Provenance fields every catalog row carries: where the figure comes from, the date that source gives
# (`undated` when it gives none: never the day we wrote the row) and the day we read it.
REF_PATTERN = r"https?://|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+"
SourceRef = Annotated[str, Field(pattern=rf"({REF_PATTERN})", description="a URL or repo@commit:path")]
SourceDate = Annotated[str, Field(pattern=r"^(\d{4}-\d{2}-\d{2}|undated)$")]
ReadDate = Annotated[str, Field(pattern=r"^(\d{4}-\d{2}-\d{2}|recalled)$")]


def file_version(path: Path) -> tuple[int, int]:
    """(mtime, size): part of the loaders' cache keys, so an edited data file is read again."""
    try:
        st = Path(path).stat()
    except OSError as err:
        raise BadInput(f"{path}: cannot read ({err.strerror})") from None
    return st.st_mtime_ns, st.st_size


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; unreadable or invalid YAML is BadInput, not a traceback."""
    import yaml

    from cheaptune.util.files import read_text

    text = read_text(path, "catalog file", "restore it or fix the path")
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: ~10x faster
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise BadInput(f"{path}:{where} is not valid YAML; fix the syntax") from None


def load_rows(path: Path, key: str, model: type[M], name_field: str) -> list[M]:
    """Validate every row under `key` with `model`; the first bad row raises one BadInput line.

    Each row carries its own provenance: no file-wide key fills it in.
    """
    doc = read_yaml(path)
    rows = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise BadInput(f"{path}: expected a top-level '{key}:' list of entries")
    out: list[M] = []
    for i, row in enumerate(rows):
        label = row.get(name_field) if isinstance(row, dict) else None
        entry = f"entry {label!r}" if label else f"entry #{i + 1}"
        if not isinstance(row, dict):
            raise BadInput(f"{path}: {entry}: expected a mapping of fields, got {type(row).__name__}")
        try:
            out.append(model.model_validate(row))
        except ValidationError as err:
            e = err.errors()[0]
            field = ".".join(str(p) for p in e["loc"]) or "(row)"
            raise BadInput(f"{path}: {entry}: field '{field}': {e['msg']} (got {e.get('input')!r})") from None
    return out
