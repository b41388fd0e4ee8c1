"""Raw rows from files, datasets folders and the hub, each with where it came from.

JSONL and CSV are read by our own pass so every row keeps its 1-based line number (the `datasets`
loaders drop it); JSON and Parquet rows are named by their 0-based index. Rows stream, so a big
JSONL, CSV or Parquet file is never held whole in memory.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cheaptune.data.formats import RowProblem
from cheaptune.errors import BadInput
from cheaptune.util.files import check_file, read_bytes
from cheaptune.util.hub import offline

Located = tuple[str, Any]  # (where, row or RowProblem)

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
            ".parquet": "parquet", ".pq": "parquet"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
JSON_COLUMNS = ("messages", "conversations")  # CSV cells that may hold a JSON list
JSON_LIMIT = 2**31  # a .json file is parsed whole; beyond this, JSONL streams
WHAT = "dataset"


def iter_rows(path: str | os.PathLike, split: str | None = None) -> Iterator[Located]:
    """Dispatch on what `path` is: a file by suffix, a save_to_disk folder, or a hub id."""
    p = Path(path)
    if _probe(p.is_dir):
        if p.suffix.lower() in SUFFIXES:
            raise BadInput(f"{WHAT} {p} is a folder, not a {p.suffix} file; pass the data file inside it")
        return _saved_dataset(p, split)
    if _probe(p.exists):
        kind = SUFFIXES.get(p.suffix.lower())
        if kind is None:
            raise BadInput(f"{p}: unsupported file type '{p.suffix}'; use one of {', '.join(sorted(SUFFIXES))} "
                           "or a folder written by datasets' save_to_disk")
        check_file(p, WHAT, "pass a data file with rows")
        return {"jsonl": _jsonl, "json": _json, "csv": _csv, "tsv": _csv, "parquet": _parquet}[kind](p)
    if HUB_ID.match(str(path)) and not p.suffix:
        return _hub(str(path), split)
    raise BadInput(f"dataset {path} not found: pass a file (.jsonl, .json, .csv, .parquet), a save_to_disk "
                   "folder, or a hub dataset id like owner/name")


def _probe(test: Callable[[], bool]) -> bool:
    """Path.is_dir / exists, with a name too long for the file system read as "not there"."""
    try:
        return test()
    except OSError:
        return False


def _jsonl(p: Path) -> Iterator[Located]:
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                yield where, json.loads(raw)
            except UnicodeDecodeError:
                yield where, RowProblem("not valid UTF-8 text")
            except json.JSONDecodeError as err:
                yield where, RowProblem(f"not valid JSON ({err.msg} at column {err.colno})")


def _json(p: Path) -> Iterator[Located]:
    try:
        data = json.loads(read_bytes(p, WHAT, "convert it to JSONL (one row a line), which streams",
                                     max_bytes=JSON_LIMIT))
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # one object per line under a .json name: read it as JSONL
            yield from _jsonl(p)
            return
        raise BadInput(f"{p}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{p}: not valid UTF-8 text; save the file as UTF-8") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise BadInput(f"{p}: expected a JSON list of rows or {{\"data\": [...]}}; found a {type(data).__name__}")
    for i, row in enumerate(data):
        yield f"{p}[{i}]", row


def _csv(p: Path) -> Iterator[Located]:
    delimiter = "\t" if p.suffix.lower() == ".tsv" else ","
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        start = 1
        try:
            if reader.fieldnames is None:  # reads the header; an empty file has no rows
                return
            start = reader.line_num + 1
            for record in reader:
                where = f"{p}:{start}"
                start = reader.line_num + 1
                yield where, _decode_cells(record)
        except UnicodeDecodeError:
            raise BadInput(f"{p}:{start}: not valid UTF-8 text; save the file as UTF-8") from None
        except csv.Error as err:
            raise BadInput(f"{p}:{reader.line_num}: not valid CSV ({err})") from None


def _decode_cells(record: dict[str | None, Any]) -> Any:
    """CSV has only strings: decode JSON-list columns; an extra unnamed cell makes the row bad."""
    if None in record:
        return RowProblem(f"{len(record[None])} more cells than the header has columns")
    row: dict[str, Any] = dict(record)  # type: ignore[arg-type]
    for key in JSON_COLUMNS:
        cell = row.get(key)
        if isinstance(cell, str) and cell.lstrip().startswith("["):
            try:
                row[key] = json.loads(cell)
            except json.JSONDecodeError as err:
                return RowProblem(f"'{key}' cell is not valid JSON ({err.msg})")
    return row


def _parquet(p: Path) -> Iterator[Located]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(p)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise BadInput(f"{p}: not a readable Parquet file ({err})") from None
    i = 0
    for batch in pf.iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            yield f"{p}[{i}]", row
            i += 1


def _saved_dataset(p: Path, split: str | None) -> Iterator[Located]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(p))
    except FileNotFoundError:
        raise BadInput(f"{p}: a folder, but not one written by datasets' save_to_disk; pass a data file") from None
    yield from _from_dataset(ds, str(p), split)


def _from_dataset(ds: Any, name: str, split: str | None) -> Iterator[Located]:
    if isinstance(ds, dict):  # a DatasetDict
        chosen = split or ("train" if "train" in ds else None)
        if chosen not in ds:
            raise BadInput(f"{name}: choose a split with --split: one of {', '.join(ds)}")
        ds = ds[chosen]
    for i, row in enumerate(ds):
        yield f"{name}[{i}]", row


def _hub(repo_id: str, split: str | None) -> Iterator[Located]:
    if offline(datasets=True):
        raise BadInput(f"dataset {repo_id} is not a local file and the hub is off (HF_HUB_OFFLINE=1); "
                       "download it first or pass a local file")
    import datasets

    try:
        ds = datasets.load_dataset(repo_id, split=split)
    except Exception as err:  # network, auth and missing-repo errors all end here
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise BadInput(f"could not load hub dataset {repo_id} ({first}); check the id, the network, "
                       "or pass a local file") from None
    yield from _from_dataset(ds, repo_id, split)
