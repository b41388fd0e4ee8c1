"""The one place a user's file is opened: every file-level defect becomes one BadInput line.

Configs, plan files, datasets, price CSVs, model configs and registry files all pass through here, so
a missing file, a folder, a device node, an unreadable, empty, oversized or non-UTF-8 file reads the
same way everywhere: the file's role, its path, the problem and what to do. Format errors (bad YAML,
a truncated JSON) stay with each format's reader, which knows the line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cheaptune.errors import BadInput

MiB = 2**20
TEXT_LIMIT = 64 * MiB  # configs, plans, price tables, config.json: far larger is a wrong file


def check_file(path: str | os.PathLike, what: str, fix: str = "", *, max_bytes: int | None = None,
               allow_empty: bool = False) -> Path:
    """`path` if it is a readable, non-empty regular file of at most `max_bytes`; else BadInput.

    `what` names the file's role ("training config"), `fix` says how to get a good one."""
    p = Path(path)
    tail = f"; {fix}" if fix else ""
    try:
        st = p.stat()
    except OSError as err:
        raise BadInput(f"{what} {_short(p)} {_why(err)}{tail}") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{what} {_short(p)} is a folder, not a file{tail}")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{what} {_short(p)} is not a regular file (a device, pipe or socket){tail}")
    if st.st_size == 0 and not allow_empty:
        raise BadInput(f"{what} {_short(p)} is empty{tail}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise BadInput(f"{what} {_short(p)} is {st.st_size / MiB:.1f} MiB, more than the {max_bytes / MiB:g} MiB "
                       f"accepted; is it the right file?{tail}")
    if not os.access(p, os.R_OK):
        raise BadInput(f"{what} {_short(p)} cannot be read (permission denied); check its permissions{tail}")
    return p


def read_bytes(path: str | os.PathLike, what: str, fix: str = "", *, max_bytes: int = TEXT_LIMIT,
               allow_empty: bool = False) -> bytes:
    """The whole file, after check_file; a file that grows past `max_bytes` while read is refused too."""
    p = check_file(path, what, fix, max_bytes=max_bytes, allow_empty=allow_empty)
    try:
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise BadInput(f"{what} {_short(p)} {_why(err)}{'; ' + fix if fix else ''}") from None
    if len(data) > max_bytes:
        raise BadInput(f"{what} {_short(p)} is over the {max_bytes / MiB:g} MiB accepted; is it the right file?")
    return data


def read_text(path: str | os.PathLike, what: str, fix: str = "", *, max_bytes: int = TEXT_LIMIT,
              allow_empty: bool = False) -> str:
    """The file as UTF-8 text (a leading BOM dropped); binary or other encodings are one BadInput line."""
    data = read_bytes(path, what, fix, max_bytes=max_bytes, allow_empty=allow_empty)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise BadInput(f"{what} {_short(Path(path))} is not UTF-8 text (line {line}, byte {err.start}); "
                       "save it as UTF-8 or pass the right file") from None


def _why(err: OSError) -> str:
    """An OSError as words a user acts on."""
    reasons = {
        errno.ENOENT: "not found", errno.ENOTDIR: "not found (a part of the path is a file)",
        errno.EACCES: "cannot be read (permission denied); check its permissions",
        errno.EPERM: "cannot be read (permission denied); check its permissions",
        errno.ENAMETOOLONG: "has a name too long for the file system",
        errno.ELOOP: "is a symlink loop", errno.EISDIR: "is a folder, not a file",
    }
    return reasons.get(err.errno, f"cannot be read ({err.strerror or type(err).__name__})")


def _short(p: Path, limit: int = 120) -> str:
    """The path for a message, cut in the middle when huge (a fuzzed name must not flood the terminal)."""
    s = str(p)
    return s if len(s) <= limit else f"{s[:limit // 2]}...{s[-limit // 2:]}"
