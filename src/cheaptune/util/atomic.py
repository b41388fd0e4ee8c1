"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cheaptune.errors import BadInput


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike, text: str, check: Callable[[Path], None] | None = None) -> None:
    """Write `text` to `path` through a temporary file in the same folder, then rename."""
    write_bytes(path, text.encode(), check)


def write_bytes(path: str | os.PathLike, data: bytes, check: Callable[[Path], None] | None = None) -> None:
    """As write_text; `check(tmp)` may validate the complete temporary file (it keeps the target's
    suffix) and raise, and then `path` is left as it was. A symlink is kept and its target replaced;
    an existing file keeps its permissions; a folder or device at `path` is refused (BadInput)."""
    target, mode = destination(Path(path))
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except OSError as err:  # full disk, read-only or missing folder: the old file stays, one line says why
        raise BadInput(f"cannot write {path} ({err.strerror or type(err).__name__}); "
                       "the previous file, if any, is unchanged") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def destination(path: Path) -> tuple[Path, int]:
    """The file to replace (a symlink's target) and the mode to give it."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = target.stat()
    except FileNotFoundError:
        return target, 0o666 & ~_umask()
    except OSError as err:
        raise BadInput(f"cannot write {path} ({err.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{path} is a folder; give a file name, e.g. {path / 'out.yaml'}")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path} is not a regular file (a device, pipe or socket); give a file name")
    return target, stat.S_IMODE(st.st_mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `path` in one rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        move_dir_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def move_dir_into_place(src: Path, target: Path) -> None:
    """Rename the finished folder `src` to `target` (a sibling), replacing an existing one; a reader sees
    the old folder or the new one under `target`, never a mix."""
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(src, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, target)
    _fsync_dir(target.parent)
