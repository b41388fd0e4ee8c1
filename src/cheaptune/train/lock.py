"""One trainer per output folder: a second `cheaptune train` on the same folder refuses at once.

Two runs writing one folder interleave their logs, race on checkpoints and overwrite one adapter with
the other. The lock is an flock on the folder itself (no lock file to leave behind or to go stale):
the kernel drops it when the process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cheaptune.errors import BadInput


@contextmanager
def output_lock(output_dir: str | os.PathLike, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on `output_dir` (created if missing) while the body runs."""
    if not enabled:
        yield
        return
    folder = Path(output_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        why = "a file is in the way" if isinstance(err, (FileExistsError, NotADirectoryError)) else err.strerror
        raise BadInput(f"cannot use output folder {folder} ({why}); pass another --output-dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadInput(f"another `cheaptune train` is writing to {folder}; wait for it to finish "
                           "or pass another --output-dir") from None
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
